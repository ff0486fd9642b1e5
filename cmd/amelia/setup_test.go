package main_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/k8stest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/sshtest"
	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
)

// withSetup adds sandbox.setup (a shell command) to a sandbox block in
// YAML flow style.
func withSetup(sandbox, command string) string {
	q, _ := json.Marshal(command)
	return strings.TrimSuffix(sandbox, "}") + ", setup: " + string(q) + "}"
}

// setupEnv overrides the e2e profile's sandbox.setup for one command.
func setupEnv(command string) string {
	return "AMELIA_PROFILES__E2E__SANDBOX__SETUP=" + command
}

// `amelia sandbox prepare` sets the profile's sandbox up once, ahead of
// time, showing each command; a second says it is up to date; a run's
// sandbox then holds the setup's result without running it again (the
// command appends a line: it is there once); changed commands are
// prepared again; a failing one is a one-line error naming it and its
// exit code, and keeps nothing (docker: no image; daytona: no snapshot).
// Where the provider keeps no setup (ssh, kubernetes), the host runs the
// commands in the sandbox, once.
func TestSandboxPrepare(t *testing.T) {
	cases := []struct {
		name    string
		sandbox func(t *testing.T) (block string, env []string, kept func() int)
	}{
		{name: "docker", sandbox: func(t *testing.T) (string, []string, func() int) {
			cli := dockertest.Engine(t)
			dockertest.RemoveNewImages(t, cli, "amelia-setup")
			kept := func() int {
				list, err := cli.ImageList(t.Context(), client.ImageListOptions{Filters: make(client.Filters).Add("reference", "amelia-setup")})
				if err != nil {
					t.Fatal(err)
				}
				return len(list.Items)
			}
			return `{provider: docker, docker: {base_image: "` + image.TestBase + `"}}`, nil, kept
		}},
		{name: "daytona", sandbox: func(t *testing.T) (string, []string, func() int) {
			f := daytonatest.Start(t, daytonatest.Options{Docker: dockertest.Engine(t)})
			block := daytonaSandbox(t, f, "open")
			block = strings.Replace(block, `"api_key_env"`, `"image":"`+image.TestBase+`","api_key_env"`, 1)
			return block, []string{"DAYTONA_E2E_KEY=" + f.APIKey()}, func() int { return len(f.Snapshots()) }
		}},
		{name: "ssh", sandbox: func(t *testing.T) (string, []string, func() int) {
			srv := sshtest.Start(t, sshtest.Options{})
			return sshSandbox(t, srv, t.TempDir()), nil, nil
		}},
		// No kept image (the cluster has no registry to push one to): the
		// host runs the commands once per sandbox, by its marker.
		{name: "kubernetes", sandbox: func(t *testing.T) (string, []string, func() int) {
			c := k8stest.Start(t)
			return kubernetesSandbox(c, c.Namespace(t), "open", nil), []string{"KUBECONFIG=" + c.Kubeconfig()}, nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			block, env, kept := c.sandbox(t)
			b := make([]byte, 6)
			_, _ = rand.Read(b)
			line := "set up " + hex.EncodeToString(b)
			setup := `echo "` + line + `" >> "$HOME/setup.log"`
			h := newHostWith(t, withSetup(block, setup), "", llmtest.Options{},
				llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("ready.txt", "ready\n")}},
				llmtest.Turn{Text: "Done."},
			)
			h.env = append(h.env, env...)
			t.Cleanup(func() { h.amelia(t, "sandbox", "down", "--force") })

			r := h.amelia(t, "sandbox", "prepare")
			if r.code != 0 || !strings.Contains(r.stdout, "is prepared (provider "+c.name+")") || !strings.Contains(r.stderr, "setup 1/1: "+setup) {
				t.Fatalf("amelia sandbox prepare: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
			r = h.amelia(t, "sandbox", "prepare")
			if r.code != 0 || !strings.Contains(r.stdout, "is up to date (provider "+c.name+")") || strings.Contains(r.stderr, "setup 1/1") {
				t.Errorf("a second amelia sandbox prepare: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}

			r = h.amelia(t, "run", "--workflow", "ready", "Write ready.txt.")
			if r.code != 0 || strings.Contains(r.stderr, "setup 1/1") {
				t.Fatalf("amelia run after prepare: exit %d (want 0, the setup not run again)\nstderr: %s", r.code, r.stderr)
			}
			if got := h.amelia(t, "sandbox", "exec", "--", "sh", "-c", `cat "$HOME/setup.log"`); got.code != 0 || got.stdout != line+"\n" {
				t.Errorf("the run's sandbox's ~/setup.log: exit %d %q, want the setup's line once", got.code, got.stdout)
			}

			h.env = append(h.env, setupEnv(setup+" && echo changed"))
			if r := h.amelia(t, "sandbox", "prepare"); r.code != 0 || !strings.Contains(r.stdout, "is prepared") {
				t.Errorf("prepare of changed commands: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}

			before := 0
			if kept != nil {
				before = kept()
			}
			h.env = append(h.env, setupEnv("echo the install broke >&2; exit 7"))
			r = h.amelia(t, "sandbox", "prepare")
			var msg string
			for _, l := range strings.Split(r.stderr, "\n") {
				if strings.Contains(l, "setup command 1") {
					msg = l
				}
			}
			if r.code == 0 || !strings.Contains(msg, "exited 7") || !strings.Contains(msg, "nothing of the setup was kept") {
				t.Errorf("a failing setup: exit %d, its line %q\nstderr: %s", r.code, msg, r.stderr)
			}
			if kept != nil {
				if after := kept(); after != before {
					t.Errorf("a failed setup left something: %d kept setups before, %d after", before, after)
				}
			}
		})
	}
}
