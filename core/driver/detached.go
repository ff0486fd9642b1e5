package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"path"
	"strconv"
	"time"

	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Errors of detached runs.
var (
	// ErrDisconnected: the connection to the sandbox broke while following
	// a detached run; the run itself goes on, and following it again
	// resumes where this stopped.
	ErrDisconnected = errors.New("the connection to the sandbox broke")
	// ErrRunBusy: another run holds the lock a detached run was to take.
	ErrRunBusy = errors.New("the sandbox is in use by another run")
	// ErrRunLost: the run's supervisor in the sandbox is gone without
	// saying how the run ended (the sandbox restarted).
	ErrRunLost = errors.New("the run is gone from the sandbox")
)

// Exit codes of the worker's detach, follow and stop.
const (
	exitBusy  = 4   // detach: the lock is held
	exitNoRun = 125 // follow, stop: no run, or its supervisor is gone
)

// Detached is an agentic run that lives in the sandbox on its own, in the
// run directory Dir (see StartAgentic), whatever happens to the connection
// that started it.
type Detached struct {
	Dir string
	// Seen counts the lines of the run read so far: following again goes
	// on after them.
	Seen int

	result bool // the result line was among them
}

// DetachOptions are a detached run's options.
type DetachOptions struct {
	// Lock is a file in the sandbox the run holds an exclusive flock on
	// while it lives; its start fails with ErrRunBusy when another holds
	// it. Empty: none.
	Lock string
	// Grace is how long a stopped run has between SIGTERM and SIGKILL;
	// zero is StopGrace.
	Grace time.Duration
	// PrivateHome gives the agent a HOME and a TMPDIR of its own, made
	// 0700 inside the run directory (HomeDir and TmpDir): for a run whose
	// uid no user of the sandbox has, which no other run may reach.
	PrivateHome bool
	// Tunnel has the run's supervisor hold the sandbox end of the agent's
	// tunnel to the proxy for as long as the agent lives, with the run
	// token of d.Env (AMELIA_PROXY_TOKEN): the agent's AMELIA_PROXY_URL
	// leads there, and the host carries it with tunnel.Open's Run. With
	// EgressProxy, its HTTP_PROXY and HTTPS_PROXY too.
	Tunnel, EgressProxy bool
}

// HomeDir and TmpDir are the agent's HOME and TMPDIR inside its run
// directory, with DetachOptions.PrivateHome.
const (
	HomeDir = "home"
	TmpDir  = "tmp"
)

// AgentStateDir is where, in a detached run's directory, a CLI agent
// keeps its home, configuration and state.
const AgentStateDir = "agent"

// PromptFile is the name of the prompt in a detached run's directory.
const PromptFile = "prompt.txt"

// StartAgentic starts `amelia-worker agentic` for req detached in the run
// directory dir, an absolute path inside the sandbox that holds no run
// yet, and returns once it runs. The prompt goes to dir/prompt.txt and
// stays there for the life of the run; the worker's environment is d.Env.
// Once the start itself has begun, a cancelled ctx does not cut it short:
// it returns the run it started, for the caller to stop.
func (d *Driver) StartAgentic(ctx context.Context, req AgenticRequest, dir string, opts DetachOptions) (*Detached, error) {
	if err := d.checkAgentic(req); err != nil {
		return nil, err
	}
	if !path.IsAbs(dir) || path.Clean(dir) != dir {
		return nil, fmt.Errorf("%w: run directory %q: want a clean absolute path", sdk.ErrInvalid, dir)
	}
	files := []sandboxFile{{what: "prompt", path: dir + "/" + PromptFile, data: req.Prompt}}
	if req.Instructions != "" {
		files = append(files, sandboxFile{what: "instructions", path: dir + "/instructions.txt", data: req.Instructions})
	}
	for _, f := range files {
		if err := d.writeFile(ctx, dir, f); err != nil {
			return nil, err
		}
	}
	grace := opts.Grace
	if grace == 0 {
		grace = StopGrace
	}
	argv := []string{d.Worker, "detach", "--dir", dir, "--grace", grace.String()}
	if opts.Lock != "" {
		argv = append(argv, "--lock", opts.Lock)
	}
	if opts.PrivateHome {
		argv = append(argv, "--home", dir+"/"+HomeDir, "--tmpdir", dir+"/"+TmpDir)
	}
	if opts.Tunnel {
		argv = append(argv, "--tunnel")
		if opts.EgressProxy {
			argv = append(argv, "--egress-proxy")
		}
	}
	argv = append(argv, "--", d.Worker, "agentic", "--prompt-file", files[0].path, "--cwd", req.Cwd, "--model", req.Model)
	if len(files) > 1 {
		argv = append(argv, "--instructions-file", files[1].path)
	}
	if req.MaxTurns > 0 {
		argv = append(argv, "--max-turns", strconv.Itoa(req.MaxTurns))
	}
	argv = append(argv, req.Agent.args(dir+"/"+AgentStateDir)...)
	var stderr execreport.Stderr
	// The start runs to its end even when ctx is cancelled meanwhile: a
	// detach cut short could leave a supervisor running that the caller,
	// told the start failed, would not know to stop. The caller sees ctx
	// done and stops the agent it now knows of. fileTimeout bounds it.
	st, err := d.Exec.Exec(context.WithoutCancel(ctx), sdk.ExecRequest{Argv: argv, Env: d.Env, Timeout: fileTimeout}, sdk.ExecIO{Stderr: &stderr})
	switch {
	case err != nil:
		return nil, fmt.Errorf("start the agent on %s: %w", d.provider(), err)
	case st.Code == exitBusy:
		return nil, fmt.Errorf("start the agent on %s: %w%s", d.provider(), ErrRunBusy, stderr.Note())
	case st.Code != 0:
		return nil, fmt.Errorf("start the agent on %s: %s%s", d.provider(), execreport.Status(st), stderr.Note())
	}
	d.logger().Debug("agent detached", "dir", dir)
	return &Detached{Dir: dir}, nil
}

// FollowAgentic yields the messages of the detached run r from r.Seen on,
// as ExecuteAgentic yields those of a run it started, until the run ends,
// and counts them in r.Seen. When the connection breaks first, the last
// thing yielded is an error matching ErrDisconnected: the run goes on, and
// FollowAgentic on r again resumes after the last line seen. Stopping the
// iteration or cancelling ctx stops following, not the run. Usage reports
// the usage line once it was seen.
func (d *Driver) FollowAgentic(ctx context.Context, r *Detached) iter.Seq2[protocol.AgenticMessage, error] {
	return d.follow(ctx, r, false)
}

// AgenticLog yields the messages the detached run in dir wrote so far,
// and with wait those it writes until it ends, as FollowAgentic does.
// Without wait, a run still going is no error.
func (d *Driver) AgenticLog(ctx context.Context, dir string, wait bool) iter.Seq2[protocol.AgenticMessage, error] {
	return d.follow(ctx, &Detached{Dir: dir}, !wait)
}

// follow runs `amelia-worker follow` on r from r.Seen on; with noWait it
// stops at the end of what the run wrote so far.
func (d *Driver) follow(ctx context.Context, r *Detached, noWait bool) iter.Seq2[protocol.AgenticMessage, error] {
	return func(yield func(protocol.AgenticMessage, error) bool) {
		argv := []string{d.Worker, "follow", "--dir", r.Dir, "--skip", strconv.Itoa(r.Seen)}
		if noWait {
			argv = append(argv, "--no-wait")
		}
		stopped := false
		out, err := d.runWorker(ctx, argv, true, func(m *protocol.AgenticMessage) bool {
			if m.Type == protocol.Result {
				r.result = true
			}
			stopped = !yield(*m, nil)
			return !stopped
		})
		r.Seen += out.lines
		if out.usage != nil {
			d.setUsage(out.usage)
		}
		// No result line yet is no error when it came before the
		// connection broke, or when the run goes on.
		if errors.Is(err, ErrNoResult) && (r.result || noWait) {
			err = nil
		}
		if err != nil && !stopped {
			yield(protocol.AgenticMessage{}, err)
		}
	}
}

// StopAgentic stops the detached run in dir and everything it started,
// and waits until it has ended: the worker writes its interrupted result,
// which following the run reads. It runs even when ctx is done.
func (d *Driver) StopAgentic(ctx context.Context, dir string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout+cancelGrace)
	defer cancel()
	var stderr execreport.Stderr
	argv := []string{d.Worker, "stop", "--dir", dir, "--wait", cleanupTimeout.String()}
	st, err := d.Exec.Exec(ctx, sdk.ExecRequest{Argv: argv}, sdk.ExecIO{Stderr: &stderr})
	switch {
	case err != nil:
		return fmt.Errorf("stop the agent on %s: %w", d.provider(), err)
	case st.Code == exitNoRun:
		return fmt.Errorf("stop the agent on %s: %w%s", d.provider(), ErrRunLost, stderr.Note())
	case st.Code != 0:
		return fmt.Errorf("stop the agent on %s: %s%s", d.provider(), execreport.Status(st), stderr.Note())
	}
	return nil
}

// maxPrompt bounds the prompt AgenticPrompt reads back.
const maxPrompt = 16 << 20

// AgenticPrompt reads back the prompt of the detached run in dir, as
// StartAgentic wrote it.
func (d *Driver) AgenticPrompt(ctx context.Context, dir string) (string, error) {
	var stdout bytes.Buffer
	var stderr execreport.Stderr
	argv := []string{"cat", "--", dir + "/" + PromptFile}
	st, err := d.Exec.Exec(ctx, sdk.ExecRequest{Argv: argv, Timeout: fileTimeout}, sdk.ExecIO{Stdout: &limitedWriter{w: &stdout, n: maxPrompt}, Stderr: &stderr})
	if err != nil {
		return "", fmt.Errorf("read the agent's prompt on %s: %w", d.provider(), err)
	}
	if st.Code != 0 {
		return "", fmt.Errorf("read the agent's prompt on %s: %s%s", d.provider(), execreport.Status(st), stderr.Note())
	}
	return stdout.String(), nil
}

// RunState is how a detached run is.
type RunState struct {
	State AgentState `json:"state"`
	// Code is the run's exit code once it ended.
	Code *int `json:"code,omitempty"`
}

// AgentState is what amelia-worker status says of a detached run.
type AgentState string

const (
	AgentRunning AgentState = "running"
	AgentEnded   AgentState = "ended"
	// AgentLost: its supervisor died without an exit status.
	AgentLost AgentState = "lost"
	// AgentNone: no run in the directory.
	AgentNone AgentState = "none"
)

// AgenticState says how the detached run in dir is.
func (d *Driver) AgenticState(ctx context.Context, dir string) (RunState, error) {
	var rs RunState
	var stdout bytes.Buffer
	var stderr execreport.Stderr
	argv := []string{d.Worker, "status", "--dir", dir}
	st, err := d.Exec.Exec(ctx, sdk.ExecRequest{Argv: argv, Timeout: fileTimeout}, sdk.ExecIO{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return rs, fmt.Errorf("ask %s how the agent is: %w", d.provider(), err)
	}
	if st.Code != 0 {
		return rs, fmt.Errorf("ask %s how the agent is: %s%s", d.provider(), execreport.Status(st), stderr.Note())
	}
	if err := json.Unmarshal(stdout.Bytes(), &rs); err != nil {
		return rs, fmt.Errorf("ask %s how the agent is: %v: %s", d.provider(), err, clip(stdout.String()))
	}
	return rs, nil
}

// wholeLines passes on only whole lines: a line the stream was cut in
// the middle of (the connection broke) is dropped at the end, so that
// nothing is counted as seen that was not.
type wholeLines struct {
	r     io.Reader
	chunk []byte
	tail  []byte // read, after the last newline passed on
	buf   []byte
	err   error
}

func (w *wholeLines) Read(p []byte) (int, error) {
	for len(w.buf) == 0 {
		if w.err != nil {
			return 0, w.err
		}
		if w.chunk == nil {
			w.chunk = make([]byte, 32<<10)
		}
		n, err := w.r.Read(w.chunk)
		w.tail = append(w.tail, w.chunk[:n]...)
		if i := bytes.LastIndexByte(w.tail, '\n'); i >= 0 {
			w.buf = append(w.buf, w.tail[:i+1]...)
			w.tail = append(w.tail[:0], w.tail[i+1:]...)
		}
		w.err = err
	}
	n := copy(p, w.buf)
	w.buf = w.buf[n:]
	return n, nil
}
