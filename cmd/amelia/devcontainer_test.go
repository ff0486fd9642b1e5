package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
)

// A repository's .devcontainer/devcontainer.json (JSON with comments)
// gives a docker run its environment: its Dockerfile built with its
// context and args (without Amelia's toolchain), its containerEnv, and its
// postCreateCommand run in the run's checkout as the run's uid, what it
// made kept off the result branch; what is not supported is said in one
// warning. A changed devcontainer is refused on the sandbox made for the
// old one until it is taken down; then an `image:` that is a local tag
// is used, and a failing postCreateCommand, or one that changes a tracked
// file, fails the run with its output.
func TestRunWithDevcontainer(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveNewImages(t, cli, "amelia-devcontainer") // after the containers: registered first
	const look = `cat /opt/greeting /opt/tool.txt; echo "mode=$PROJECT_MODE"; cat setup-made.txt; echo "uid=$(id -u) setup=$(cat setup-uid.txt)"; command -v jq || echo no-jq; echo "status:$(git status --porcelain)"; echo looked`
	h := newDockerHost(t, cli, dockerSandbox("none", "127.0.0.1:9"),
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall(look)}},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("calc.py", "def add(a, b):\n    return a + b\n")}},
		llmtest.Turn{Text: "Added calc.py."},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall("cat /opt/marker; echo looked")}},
		llmtest.Turn{Text: "Looked."},
	)
	if err := os.MkdirAll(filepath.Join(h.repo, ".devcontainer"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(h.repo, "tool.txt"), "a tool from the repository\n")
	writeFile(t, filepath.Join(h.repo, ".devcontainer", "Dockerfile"),
		"FROM "+image.TestBase+"\nARG GREETING=unset\nCOPY tool.txt /opt/tool.txt\nRUN echo \"$GREETING\" > /opt/greeting && dpkg --purge jq >/dev/null\n")
	writeFile(t, filepath.Join(h.repo, ".devcontainer", "devcontainer.json"), `// The project's environment.
{
	"name": "calc",
	"build": {
		"dockerfile": "Dockerfile",
		"context": "..", // the repository's top
		"args": {"GREETING": "hello from the build"},
	},
	/* what every command gets */
	"containerEnv": {"PROJECT_MODE": "ci", "PATH": "${containerEnv:PATH}:/opt/x"},
	"postCreateCommand": {
		"made": "echo made > setup-made.txt && mkdir -p .cache/tool && echo x > .cache/tool/f",
		"uid": ["sh", "-c", "id -u > setup-uid.txt"],
	},
	"remoteUser": "vscode",
	"features": {"ghcr.io/devcontainers/features/node:1": {}},
	"forwardPorts": [3000],
}
`)
	h.git(t, "add", "-A")
	h.git(t, "commit", "-q", "-m", "devcontainer")

	r := h.amelia(t, "run", "--json", "--workflow", "dc-build", "Add calc.")
	if r.code != 0 {
		t.Fatalf("amelia run: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	looked := toolOutput(t, r.stdout, "looked")
	for _, want := range []string{"hello from the build\na tool from the repository\nmode=ci\nmade\n", "no-jq\nstatus:\nlooked"} {
		if !strings.Contains(looked, want) {
			t.Errorf("the agent's sandbox shows:\n%s\nwant in it:\n%s", looked, want)
		}
	}
	var uid, setupUID string
	for l := range strings.SplitSeq(looked, "\n") {
		if rest, ok := strings.CutPrefix(l, "uid="); ok {
			uid, setupUID, _ = strings.Cut(rest, " setup=")
		}
	}
	if uid == "" || uid == "1000" || uid != setupUID {
		t.Errorf("the agent ran as uid %q and the postCreateCommand as %q: want the run's own uid for both", uid, setupUID)
	}
	warning := "not supported, so not applied: remoteUser vscode (each run's steps and agent run as a uid of the run's own); containerEnv.PATH (uses ${...}), features, forwardPorts"
	if !strings.Contains(r.stderr, warning) {
		t.Errorf("stderr does not say what of the devcontainer is not applied (%q):\n%s", warning, r.stderr)
	}
	if got := h.git(t, "ls-tree", "-r", "--name-only", "amelia/dc-build"); got != ".devcontainer/Dockerfile\n.devcontainer/devcontainer.json\nREADME.md\ncalc.py\ntool.txt" {
		t.Errorf("the result branch holds:\n%s\nwant the agent's calc.py and nothing the postCreateCommand made", got)
	}
	c, err := cli.ContainerInspect(t.Context(), "amelia-sandbox-"+h.sandboxName(t, "e2e"), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Container.Config.Labels["amelia.devcontainer"]; got != ".devcontainer/devcontainer.json" {
		t.Errorf("the sandbox's amelia.devcontainer label is %q", got)
	}

	// Another environment: refused on the old sandbox, nothing run.
	tag := "amelia-e2e-devcontainer:" + strings.ToLower(strings.NewReplacer("/", "-").Replace(t.Name()))
	dockertest.BuildImage(t, cli, tag, "FROM "+image.TestBase+"\nRUN echo from the image > /opt/marker\n")
	writeFile(t, filepath.Join(h.repo, ".devcontainer", "devcontainer.json"),
		`{"image": "`+tag+`", "postCreateCommand": "echo setting up went wrong >&2; exit 7"}`)
	h.git(t, "commit", "-q", "-am", "image")
	r = h.amelia(t, "run", "--workflow", "dc-refused", "Look.")
	if r.code == 0 || !strings.Contains(r.stderr, "not the one this repository's .devcontainer/devcontainer.json asks for") || !strings.Contains(r.stderr, "amelia sandbox down") {
		t.Errorf("a changed devcontainer on the old sandbox: exit %d\n%s", r.code, r.stderr)
	}
	if down := h.amelia(t, "sandbox", "down"); down.code != 0 {
		t.Fatalf("amelia sandbox down: exit %d\n%s", down.code, down.stderr)
	}

	r = h.amelia(t, "run", "--workflow", "dc-broken", "Look.")
	if r.code != 1 || !strings.Contains(r.stderr, "postCreateCommand") || !strings.Contains(r.stderr, "exited 7") || !strings.Contains(r.stderr, "setting up went wrong") {
		t.Errorf("a failing postCreateCommand: exit %d\n%s", r.code, r.stderr)
	}
	if n := len(h.up.Requests()); n != 3 {
		t.Errorf("the LLM got %d requests, want the first run's 3: the refused and failed runs must not start the agent", n)
	}

	// A command that changes a tracked file would pass its change off as
	// the agent's: refused.
	writeFile(t, filepath.Join(h.repo, ".devcontainer", "devcontainer.json"), `{"image": "`+tag+`", "postCreateCommand": "echo more >> README.md"}`)
	h.git(t, "commit", "-q", "-am", "tracked")
	r = h.amelia(t, "run", "--workflow", "dc-tracked", "Look.")
	if r.code != 1 || !strings.Contains(r.stderr, "changed tracked files (M README.md)") {
		t.Errorf("a postCreateCommand that changes a tracked file: exit %d\n%s", r.code, r.stderr)
	}

	writeFile(t, filepath.Join(h.repo, ".devcontainer", "devcontainer.json"), `{"image": "`+tag+`", "postCreateCommand": ["true"]}`)
	h.git(t, "commit", "-q", "-am", "fixed")
	r = h.amelia(t, "run", "--json", "--workflow", "dc-image", "Look.")
	if r.code != 0 {
		t.Fatalf("amelia run with an image: exit %d\nstderr: %s", r.code, r.stderr)
	}
	if got := toolOutput(t, r.stdout, "looked"); !strings.Contains(got, "from the image\nlooked") {
		t.Errorf("the sandbox of the devcontainer's image shows:\n%s", got)
	}
}
