package daytonatest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
)

// forEachBackend runs test against a fake on the host backend, and on the
// Docker backend when an engine answers (dockertest.Engine skips loudly,
// or fails under AMELIA_REQUIRE_DOCKER, when none does).
func forEachBackend(t *testing.T, opts Options, test func(t *testing.T, f *Fake)) {
	t.Run("host", func(t *testing.T) {
		t.Parallel()
		o := opts
		o.Docker = nil
		test(t, Start(t, o))
	})
	t.Run("docker", func(t *testing.T) {
		t.Parallel()
		o := opts
		o.Docker = dockertest.Engine(t)
		test(t, Start(t, o))
	})
}

// testEnv is a fake with a client whose exchanges are checked against the
// spec.
type testEnv struct {
	f    *Fake
	c    *api.Client
	conf *conformance
	http *http.Client
}

func newEnv(t *testing.T, f *Fake) *testEnv {
	t.Helper()
	conf := newConformance(t)
	c, err := api.New(api.Options{BaseURL: f.URL(), APIKey: f.APIKey(), Organization: f.Organization(), HTTPClient: conf.client(), MaxWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{f: f, c: c, conf: conf, http: conf.client()}
}

// raw sends a request with the fake's key (unless header overrides
// Authorization) and returns the status, headers and body.
func (e *testEnv) raw(t *testing.T, method, url string, body any, header map[string]string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.f.APIKey())
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// errorMessage is the message of an error body.
func errorMessage(t *testing.T, b []byte) string {
	t.Helper()
	var eb api.ErrorBody
	if err := json.Unmarshal(b, &eb); err != nil {
		t.Fatalf("error body %q: %v", b, err)
	}
	m, _ := eb.Message.(string)
	return m
}

// create creates a sandbox and fails the test on error.
func (e *testEnv) create(t *testing.T, req api.CreateSandbox) api.Sandbox {
	t.Helper()
	sb, err := e.c.CreateSandbox(context.Background(), req)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	return sb
}

// waitState polls the sandbox until it is in want and returns the states
// it went through (distinct, in order), failing on a failure state that
// was not wanted, on started when a failure was, or when the test ends.
func (e *testEnv) waitState(t *testing.T, id string, want api.State) (api.Sandbox, []api.State) {
	t.Helper()
	var seen []api.State
	for {
		sb, err := e.c.GetSandbox(context.Background(), id)
		if want == api.StateDestroyed && api.StatusOf(err) == http.StatusNotFound {
			return sb, append(seen, api.StateDestroyed)
		}
		if err != nil {
			t.Fatalf("get sandbox %s: %v", id, err)
		}
		if len(seen) == 0 || seen[len(seen)-1] != sb.State {
			seen = append(seen, sb.State)
		}
		if sb.State == want {
			return sb, seen
		}
		if sb.State.Failed() || want.Failed() && sb.State == api.StateStarted {
			t.Fatalf("sandbox %s: %s (%s) while waiting for %s; states %v", id, sb.State, sb.ErrorReason, want, seen)
		}
		if t.Context().Err() != nil {
			t.Fatalf("sandbox %s: still %s when the test ended, waiting for %s; states %v", id, sb.State, want, seen)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}

// listUntil lists the sandboxes carrying labels until ok says the list
// is what the test waits for (the list lags), failing when the test ends; it
// returns that list.
func (e *testEnv) listUntil(t *testing.T, labels map[string]string, ok func([]api.Sandbox) bool) []api.Sandbox {
	t.Helper()
	for {
		list, err := e.c.ListSandboxes(context.Background(), labels)
		if err != nil {
			t.Fatalf("list %v: %v", labels, err)
		}
		if ok(list) {
			return list
		}
		if t.Context().Err() != nil {
			t.Fatalf("list %v: still %+v when the test ended", labels, list)
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}

// ids are the ids of sandboxes, in order.
func ids(list []api.Sandbox) []string {
	var out []string
	for _, sb := range list {
		out = append(out, sb.ID)
	}
	return out
}

// started creates a sandbox and waits until it is started; it returns
// the states it went through, the create's answer's first.
func (e *testEnv) started(t *testing.T, req api.CreateSandbox) (api.Sandbox, []api.State) {
	t.Helper()
	created := e.create(t, req)
	sb, seen := e.waitState(t, created.ID, api.StateStarted)
	if seen[0] != created.State {
		seen = append([]api.State{created.State}, seen...)
	}
	return sb, seen
}

// token mints an SSH access token.
func (e *testEnv) token(t *testing.T, id string) string {
	t.Helper()
	a, err := e.c.CreateSSHAccess(context.Background(), id, 5)
	if err != nil {
		t.Fatalf("create SSH access: %v", err)
	}
	return a.Token
}

// dial connects to the gateway with a token, checking its host key.
func dial(f *Fake, token string) (*ssh.Client, error) {
	return ssh.Dial("tcp", f.GatewayAddr(), &ssh.ClientConfig{
		User:            token,
		HostKeyCallback: ssh.FixedHostKey(f.HostKey()),
		Timeout:         10 * time.Second,
	})
}

// login connects with a fresh token of the sandbox.
func (e *testEnv) login(t *testing.T, id string) *ssh.Client {
	t.Helper()
	c, err := dial(e.f, e.token(t, id))
	if err != nil {
		t.Fatalf("dial the gateway: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// result is how an exec ended.
type result struct {
	stdout, stderr string
	code           int
	signal         string
}

// run runs cmd over a new session, with stdin when not "".
func run(t *testing.T, c *ssh.Client, cmd, stdin string) result {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatalf("new session: %v", err)
	}
	defer s.Close()
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr = &out, &errb
	if stdin != "" {
		s.Stdin = strings.NewReader(stdin)
	}
	err = s.Run(cmd)
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *ssh.ExitError
	switch {
	case errors.As(err, &ee):
		r.code, r.signal = ee.ExitStatus(), ee.Signal()
	case err != nil:
		t.Fatalf("run %q: %v (stderr %q)", cmd, err, errb.String())
	}
	return r
}

// refused checks that the gateway refuses a login with token.
//
// The gateway lets every client through the handshake, then closes the
// connection of a token it refuses: that end is the refusal. (Opening a
// session to find out is no probe: x/crypto/ssh's NewSession on a
// connection that closes under it can wait forever.) A connection still up
// after refusalWait was let in.
func refused(t *testing.T, f *Fake, token, why string) {
	t.Helper()
	c, err := dial(f, token)
	if err != nil {
		return
	}
	defer c.Close()
	if !endsWithin(c, refusalWait) {
		t.Errorf("%s: the gateway let the token in (its connection was still up after %s)", why, refusalWait)
	}
}

// endsWithin reports whether c's connection ends within d. (A session
// opened on it to find out could wait forever: x/crypto/ssh races a close
// under NewSession.)
func endsWithin(c *ssh.Client, d time.Duration) bool {
	ended := make(chan struct{})
	go func() {
		c.Wait()
		close(ended)
	}()
	select {
	case <-ended:
		return true
	case <-time.After(d):
		return false
	}
}

// refusalWait bounds the wait for the gateway to close a refused login's
// connection, which it does at once.
const refusalWait = 30 * time.Second

// loginToNew starts a sandbox on f and logs in to it through the gateway.
func loginToNew(t *testing.T, f *Fake) *ssh.Client {
	t.Helper()
	e := newEnv(t, f)
	sb, _ := e.started(t, api.CreateSandbox{})
	return e.login(t, sb.ID)
}
