package main_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// withoutKey is the host's environment without the profile's key: what a
// new user trying amelia has.
func (h *host) withoutKey() {
	h.env = slices.DeleteFunc(h.env, func(kv string) bool { return strings.HasPrefix(kv, "AMELIA_E2E_KEY=") })
}

// --model scripted:echo runs the whole of amelia run, sandbox, worker,
// tunnel, proxy and git, with a model on this machine that needs no key:
// the branch holds the prompt, and the profile's upstream is never called.
func TestRunScriptedEcho(t *testing.T) {
	h := newHost(t, llmtest.Options{})
	h.withoutKey()
	const prompt = "add a --verbose flag"
	r := h.amelia(t, "run", "--workflow", "echo", "--model", "scripted:echo", prompt)
	if r.code != 0 {
		t.Fatalf("amelia run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if got := h.git(t, "show", "amelia/echo:AMELIA_ECHO.md"); got != prompt {
		t.Errorf("AMELIA_ECHO.md on the branch: %q, want the prompt %q", got, prompt)
	}
	if n := strings.Count(r.stderr, scriptedNote); n != 1 {
		t.Errorf("stderr says %d times that the model is scripted, want once:\n%s", n, r.stderr)
	}
	// The agent's tunnel ends with its run: nothing to warn of.
	if strings.Contains(r.stderr, "tunnel") {
		t.Errorf("a run that went well warns of its tunnel:\n%s", r.stderr)
	}
	if n := len(h.up.Requests()); n != 0 {
		t.Errorf("the profile's upstream got %d requests", n)
	}

	// A run its check refuses says why, and nothing else.
	writeFile(t, filepath.Join(h.repo, "dirty.txt"), "x\n")
	r = h.amelia(t, "run", "--json", "--workflow", "echo-2", "--model", "scripted:echo", prompt)
	want := "amelia: check: " + h.repo + " has uncommitted changes (dirty.txt): commit or stash them, or pass --include-dirty to carry them in as a commit\n"
	if r.code != 2 || r.stderr != want {
		t.Errorf("a refused scripted run: exit %d, stderr\n%s\nwant exit 2 and only\n%s", r.code, r.stderr, want)
	}
}

// scriptedNote is how a run says its model is a scripted one.
const scriptedNote = "amelia: the model is a scripted one on this machine (scripted:echo): no API key is used\n"

// --model scripted:FILE plays the file's turns; a bad file is refused
// before anything starts.
func TestRunScriptedFile(t *testing.T) {
	h := newHost(t, llmtest.Options{})
	h.withoutKey()
	script := filepath.Join(t.TempDir(), "script.json")
	writeFile(t, script, `[
  {"text": "writing", "tool_calls": [{"name": "write_file", "arguments": {"file_path": "NOTES.md", "content": "from the script\n"}}]},
  {"text": "done"}
]`)
	r := h.amelia(t, "run", "--workflow", "file", "--model", "scripted:"+script, "take notes")
	if r.code != 0 {
		t.Fatalf("amelia run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if got := h.git(t, "show", "amelia/file:NOTES.md"); got != "from the script" {
		t.Errorf("NOTES.md on the branch: %q", got)
	}

	bad := filepath.Join(t.TempDir(), "bad.json")
	writeFile(t, bad, `{"text": "not a list"}`)
	r = h.amelia(t, "run", "--workflow", "bad", "--model", "scripted:"+bad, "x")
	if r.code != 2 || !strings.Contains(r.stderr, "want a JSON list of turns") {
		t.Errorf("a bad script: exit %d, stderr %q; want 2 and what a script looks like", r.code, r.stderr)
	}
}
