// Command demo is `make demo`: it runs `amelia run` on a throwaway git
// repository and shows the branch the agent produced.
//
// The model is the real one when the profile's key (OPENAI_API_KEY by
// default) is set in the environment; otherwise it is a scripted model
// server on loopback that plays a fixed session, and the demo says so. The
// provider is docker when this build has one and an engine answers, else
// local (which isolates nothing, and says so).
//
// Everything amelia keeps — its config, run records, audit logs, sandbox
// files — goes into the demo's own temporary directory (XDG_CONFIG_HOME and
// XDG_STATE_HOME point there), removed at the end with its sandbox: the
// demo leaves nothing in the user's own amelia directories.
//
//	go run ./internal/demo [-amelia bin/amelia]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
)

func main() {
	amelia := flag.String("amelia", "bin/amelia", "the amelia binary")
	flag.Parse()
	// Ctrl-C reaches amelia (the terminal's whole process group gets it),
	// which stops its run and exits; the demo then cleans up as after any
	// failure, rather than die leaving its directory and sandbox behind.
	signal.Notify(make(chan os.Signal, 1), os.Interrupt, syscall.SIGTERM)
	if err := demo(*amelia); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

const task = `Add a Go program hello.go that prints "hello, amelia", and mention it in the README.`

func demo(amelia string) error {
	amelia, err := filepath.Abs(amelia)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "amelia-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	repo := filepath.Join(dir, "repo")
	env := demoEnv(dir)

	var llm string
	if key := os.Getenv("OPENAI_API_KEY"); key != "" {
		fmt.Println("model: the real one, gpt-4.1-mini at https://api.openai.com/v1 (OPENAI_API_KEY is set)")
	} else {
		srv, err := llmtest.Start(llmtest.Options{}, script()...)
		if err != nil {
			return err
		}
		defer srv.Close()
		llm = fmt.Sprintf("\n    llm: {base_url: %q, api_key_env: AMELIA_DEMO_KEY}", srv.URL()+"/v1")
		env = append(env, "AMELIA_DEMO_KEY=sk-demo-scripted")
		fmt.Printf("model: a SCRIPTED model server on %s playing a fixed session (set OPENAI_API_KEY for the real one)\n", srv.URL())
	}
	config := filepath.Join(dir, "config.yaml")
	writeConfig := func(provider, settings string) error {
		// A plugin per run (no shared one, which would outlive the demo
		// for its idle time, and its socket with it).
		yaml := fmt.Sprintf("default_profile: demo\nprofiles:\n  demo:%s\n    sandbox:\n      provider: %s\n      shared_plugin: false\n      local: {root: %q}%s\n", llm, provider, filepath.Join(dir, "sandboxes"), settings)
		return os.WriteFile(config, []byte(yaml), 0o600)
	}
	provider, settings := pickProvider(amelia, env)
	if err := writeConfig(provider, settings); err != nil {
		return err
	}
	if provider == "docker" {
		// The image first (built once, its output streamed: the first
		// build takes minutes): if it cannot be built here (no registry
		// for the base), the demo goes on with local.
		fmt.Println("$ amelia image build   # the sandbox image, once: an image that is up to date is not built again")
		var out bytes.Buffer
		build := exec.Command(amelia, "--config", config, "image", "build")
		build.Env = env
		build.Stdout, build.Stderr = io.MultiWriter(os.Stdout, &out), io.MultiWriter(os.Stderr, &out)
		if err := build.Run(); err != nil {
			fmt.Printf("the sandbox image cannot be built here, so the demo uses the local provider, which isolates nothing:\n%s\n", lastLine(out.Bytes()))
			if err := writeConfig("local", ""); err != nil {
				return err
			}
		}
	}
	// The sandbox goes with the demo's directory.
	defer func() {
		fmt.Println("\n$ amelia sandbox down")
		_ = run(dir, env, amelia, "--config", config, "sandbox", "down")
		fmt.Printf("\nThe demo kept its config, run records and audit log in %s, removed now with it; your own runs keep them in ~/.config/amelia and ~/.local/state/amelia.\n", dir)
	}()

	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"-c", "user.name=Demo", "-c", "user.email=demo@example.com", "commit", "-q", "--allow-empty", "-m", "empty start"},
	} {
		if err := os.MkdirAll(repo, 0o755); err != nil {
			return err
		}
		if err := run(repo, env, "git", args...); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(repo, "README.md"), []byte("# demo\n"), 0o644); err != nil {
		return err
	}
	if err := run(repo, env, "git", "add", "README.md"); err != nil {
		return err
	}
	if err := run(repo, env, "git", "-c", "user.name=Demo", "-c", "user.email=demo@example.com", "commit", "-q", "-m", "README"); err != nil {
		return err
	}

	fmt.Printf("repository: %s\n\n$ amelia run --workflow hello %q\n", repo, task)
	if err := run(repo, env, amelia, "--config", config, "run", "--workflow", "hello", task); err != nil {
		return fmt.Errorf("amelia run: %w", err)
	}
	fmt.Println("\n$ git log --oneline main..amelia/hello")
	if err := run(repo, env, "git", "--no-pager", "log", "--oneline", "main..amelia/hello"); err != nil {
		return err
	}
	fmt.Println("\n$ git diff main amelia/hello")
	return run(repo, env, "git", "--no-pager", "diff", "main", "amelia/hello")
}

// pickProvider is docker when amelia has it and an engine answers, else
// local, and says which. It returns the profile's sandbox settings too: on
// an engine that holds the bootstrapped base (image/bootstrap-base.sh, for
// machines without a registry), the image is built from it.
func pickProvider(amelia string, env []string) (string, string) {
	cmd := exec.Command(amelia, "plugin", "ls", "--json")
	cmd.Env = env
	out, err := cmd.Output()
	var plugins []struct {
		Name string `json:"name"`
	}
	if err == nil && json.Unmarshal(out, &plugins) == nil {
		for _, p := range plugins {
			if p.Name != "docker" {
				continue
			}
			base, ok := dockerBase()
			if !ok {
				break
			}
			fmt.Printf("provider: docker (sandbox image FROM %s)\n", base)
			return "docker", fmt.Sprintf("\n      docker: {base_image: %q}", base)
		}
	}
	fmt.Println("provider: local (this build has no Docker provider, or no engine answers); it isolates nothing: the agent runs on this machine")
	return "local", ""
}

// dockerBase reports whether a Docker engine answers, and the base image
// to build the sandbox image from: the bootstrapped one when the engine has
// it, else the Dockerfile's default (pulled).
func dockerBase() (string, bool) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return "", false
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return "", false
	}
	if _, err := cli.ImageInspect(ctx, image.TestBase); err == nil {
		return image.TestBase, true
	}
	return image.DefaultBase, true
}

// script is the scripted model's session: write a file, edit another,
// run the program, answer.
func script() []llmtest.Turn {
	call := func(name string, args map[string]string) llmtest.ToolCall {
		b, _ := json.Marshal(args)
		return llmtest.ToolCall{Name: name, Arguments: string(b)}
	}
	return []llmtest.Turn{
		{Text: "I'll add hello.go first.", ToolCalls: []llmtest.ToolCall{call("write_file", map[string]string{
			"file_path": "hello.go",
			"content":   "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello, amelia\")\n}\n",
		})}},
		{Text: "Now the README.", ToolCalls: []llmtest.ToolCall{call("write_file", map[string]string{
			"file_path": "README.md",
			"content":   "# demo\n\n`go run hello.go` prints a greeting.\n",
		})}},
		{ToolCalls: []llmtest.ToolCall{call("execute", map[string]string{"command": "ls -l && cat README.md"})}},
		{Text: "Added hello.go, which prints \"hello, amelia\", and described it in the README.",
			Usage: &llmtest.Usage{PromptTokens: 1830, CompletionTokens: 145}},
	}
}

// lastLine is the last non-empty line of out.
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// demoEnv is this process's environment with amelia's own directories
// in dir (config and state: run records, audit logs, the local sandboxes'
// root) and none of the user's amelia settings, which are for the user's
// own config: an AMELIA_PROFILES__ override names a profile the demo's
// config does not have.
func demoEnv(dir string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "XDG_CONFIG_HOME", k == "XDG_STATE_HOME", k == "AMELIA_CONFIG", k == "AMELIA_DEFAULT_PROFILE",
			strings.HasPrefix(k, "AMELIA_PROFILES__"):
			continue
		}
		env = append(env, kv)
	}
	return append(env, "XDG_CONFIG_HOME="+filepath.Join(dir, "config"), "XDG_STATE_HOME="+filepath.Join(dir, "state"))
}

func run(dir string, env []string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}
