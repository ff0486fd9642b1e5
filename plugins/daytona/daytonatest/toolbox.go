package daytonatest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/sdk/sdktest"
)

// writeToolboxError answers an error as the toolbox does (ErrorResponse).
func writeToolboxError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	writeJSON(w, status, api.ToolboxError{
		Code:       code,
		Message:    msg,
		Method:     r.Method,
		Path:       r.URL.Path,
		Source:     "DAYTONA_DAEMON",
		StatusCode: status,
		Timestamp:  time.Now().UTC().Format(time.RFC3339),
	})
}

// execute answers the toolbox's POST /toolbox/{id}/process/execute: it
// runs `sh -c command` as the sandbox user in cwd (default: home) with
// envs added, and answers the exit code and the output (stdout and stderr
// combined) once it has ended; 408 after timeout seconds (default 10),
// with the command and what it started killed.
func (f *Fake) execute(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req api.ExecuteRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeToolboxError(w, r, http.StatusBadRequest, "INVALID_REQUEST_BODY", "invalid request body: "+err.Error())
		return
	}
	if req.Command == "" {
		writeToolboxError(w, r, http.StatusBadRequest, "BAD_REQUEST", "command is required")
		return
	}
	if req.Timeout < 0 {
		writeToolboxError(w, r, http.StatusBadRequest, "BAD_REQUEST", "timeout must not be negative")
		return
	}
	timeout := time.Duration(req.Timeout) * time.Second
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	f.mu.Lock()
	s, ok := f.boxes[id]
	started := ok && s.state == api.StateStarted
	if started {
		f.stats.ToolboxExecs++
		s.lastActivity = f.activityLocked() // Daytona's proxy counts toolbox requests
	}
	f.mu.Unlock()
	if !started {
		writeToolboxError(w, r, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("sandbox %s not found or not started", id))
		return
	}
	dir := req.Cwd
	if dir != "" && !path.IsAbs(dir) {
		dir = path.Join(s.home, dir)
	}
	var env []string
	for k, v := range req.Envs {
		env = append(env, k+"="+v)
	}
	var out sdktest.Buffer // two copiers write to it
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	st, err := f.backend.run(ctx, s, execRequest{cmd: req.Command, dir: dir, env: env, stdout: &out, stderr: &out, killable: true})
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		writeToolboxError(w, r, http.StatusRequestTimeout, "PROCESS_EXECUTION_TIMEOUT", fmt.Sprintf("command execution timeout after %d seconds", int(timeout/time.Second)))
		return
	}
	if err != nil {
		writeToolboxError(w, r, http.StatusBadRequest, "BAD_REQUEST", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, api.ExecuteResponse{ExitCode: st.code, Result: out.String()})
}
