package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/config"
)

// The scripted model of amelia run --model scripted:FILE or scripted:echo
// answers a long conversation whose every request holds all of it so far,
// and keeps none of those requests: kept, they would add up to the square
// of its turns (issue 25: 29 to 69 MB over 392 calls).
func TestScriptedModelKeepsNoRequests(t *testing.T) {
	const turns = 150
	script := make([]string, turns)
	for i := range script {
		script[i] = fmt.Sprintf(`{"text": "turn %d"}`, i)
	}
	file := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(file, []byte("["+strings.Join(script, ",\n")+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []string{file, "echo"} {
		t.Run(filepath.Base(spec), func(t *testing.T) {
			p, srv, err := startScripted(&config.Profile{}, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			url := p.LLM.Upstream.BaseURL + "/chat/completions"
			var conv []map[string]string
			for i := range turns {
				ask := fmt.Sprintf("ask %d ", i) + strings.Repeat("x", 1<<10)
				conv = append(conv, map[string]string{"role": "user", "content": ask})
				answer, args := askScripted(t, url, conv)
				switch {
				case spec == "echo" && !strings.Contains(args, ask):
					t.Fatalf("echo turn %d: write_file arguments %.80q, want the prompt %.20q…", i, args, ask)
				case spec != "echo" && answer != fmt.Sprintf("turn %d", i):
					t.Fatalf("answer %d: %q, want the script's turn %d", i, answer, i)
				}
				conv = append(conv, map[string]string{"role": "assistant", "content": answer})
			}
			if n := len(srv.Requests()); n != 0 {
				t.Errorf("the scripted model kept %d of its %d requests, want none", n, turns)
			}
			if errs := srv.Errors(); len(errs) != 0 {
				t.Errorf("the scripted model's errors: %v", errs)
			}
		})
	}
}

// askScripted posts the conversation to the chat completions url and
// returns the answer's text and its first tool call's arguments.
func askScripted(t *testing.T, url string, conv []map[string]string) (text, args string) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"model": "scripted", "messages": conv})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Message struct {
				Content   string `json:"content"`
				ToolCalls []struct {
					Function struct {
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || len(out.Choices) != 1 {
		t.Fatalf("POST %s: %s, %v, %+v", url, resp.Status, err, out)
	}
	m := out.Choices[0].Message
	if len(m.ToolCalls) > 0 {
		args = m.ToolCalls[0].Function.Arguments
	}
	return m.Content, args
}

// A script's model started again mid-conversation (amelia attach starts
// its own) answers the turn after those the conversation holds, not the
// first; asked past the last turn, it says so.
func TestScriptedModelGoesOnWhereTheAgentIs(t *testing.T) {
	file := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(file, []byte(`[{"text": "one"}, {"text": "two"}, {"text": "three"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	conv := []map[string]string{
		{"role": "user", "content": "go"},
		{"role": "assistant", "content": "one"},
		{"role": "user", "content": "and?"},
	}
	p, srv, err := startScripted(&config.Profile{}, file)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	url := p.LLM.Upstream.BaseURL + "/chat/completions"
	if answer, _ := askScripted(t, url, conv); answer != "two" {
		t.Errorf("a new server, asked after the first answer: %q, want the second turn", answer)
	}
	for _, a := range []string{"two", "three"} {
		conv = append(conv, map[string]string{"role": "assistant", "content": a}, map[string]string{"role": "user", "content": "more"})
	}
	body, _ := json.Marshal(map[string]any{"model": "scripted", "messages": conv})
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var msg strings.Builder
	io.Copy(&msg, resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(msg.String(), "has 3 turns, and the agent asks for turn 4") {
		t.Errorf("past the last turn: %s %s, want 400 saying the script has ended", resp.Status, msg.String())
	}
}

// The scripted model serves the gemini agent too, in Gemini's API and
// instead of the profile's own Gemini upstream: echo writes the prompt,
// then says it did; a script goes on where the conversation is.
func TestScriptedModelSpeaksGemini(t *testing.T) {
	prof := &config.Profile{LLM: config.LLM{Gemini: &config.Upstream{BaseURL: "https://gemini.invalid", APIKeyEnv: "GEMINI_API_KEY"}}}
	p, srv, err := startScripted(prof, "echo")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	g := p.LLM.Gemini
	if g == nil || g.BaseURL != srv.URL() || g.APIKeyEnv != "" || g.APIKey == "" {
		t.Fatalf("gemini upstream %+v, want the scripted server with a key of its own", g)
	}
	ask := func(contents string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "POST", g.BaseURL+"/v1beta/models/gemini-test:generateContent", strings.NewReader(`{"contents":`+contents+`}`))
		req.Header.Set("X-Goog-Api-Key", g.APIKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %s", resp.Status, b)
		}
		return string(b)
	}
	prompt := `[{"role":"user","parts":[{"text":"say hi"}]}]`
	if got := ask(prompt); !strings.Contains(got, `"functionCall":{"name":"write_file","args":{"content":"say hi\n","file_path":"`+EchoFile+`"}}`) {
		t.Errorf("asked the prompt: %s", got)
	}
	done := `[{"role":"user","parts":[{"text":"say hi"}]},{"role":"model","parts":[{"functionCall":{"name":"write_file","args":{}}}]},` +
		`{"role":"user","parts":[{"functionResponse":{"name":"write_file","response":{"output":"ok"}}}]}]`
	if got := ask(done); !strings.Contains(got, "I wrote your prompt to "+EchoFile) {
		t.Errorf("told how it went: %s", got)
	}

	file := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(file, []byte(`[{"text": "one"}, {"text": "two"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, srv2, err := startScripted(prof, file)
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	g = p.LLM.Gemini
	if got := ask(`[{"role":"user","parts":[{"text":"go"}]},{"role":"model","parts":[{"text":"one"}]},{"role":"user","parts":[{"text":"and?"}]}]`); !strings.Contains(got, `"text":"two"`) {
		t.Errorf("a script, after its first answer: %s", got)
	}
}

// A script file's path is recorded absolute, for amelia attach from any
// directory; echo and a real model are as given.
func TestScriptedModelRecorded(t *testing.T) {
	t.Chdir(t.TempDir())
	wd, _ := os.Getwd()
	for _, c := range []struct{ in, want string }{
		{"scripted:turns.json", "scripted:" + filepath.Join(wd, "turns.json")},
		{"scripted:/abs/turns.json", "scripted:/abs/turns.json"},
		{"scripted:echo", "scripted:echo"},
		{"gpt-5", "gpt-5"},
		{"", ""},
	} {
		if got, err := scriptedModel(c.in); err != nil || got != c.want {
			t.Errorf("scriptedModel(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}
