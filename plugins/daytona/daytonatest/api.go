package daytonatest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
)

// Defaults of a new sandbox, as on Daytona.
const (
	defaultCPU         = 1
	defaultMemory      = 1
	defaultDisk        = 3
	defaultTarget      = "us"
	defaultAutoStop    = 15
	defaultAutoArchive = 10080 // 7 days
	defaultAutoDelete  = -1    // disabled
)

// startHTTP serves the API and the toolbox on a loopback port.
func (f *Fake) startHTTP() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the API: %w", err)
	}
	f.base = "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/sandbox", f.listSandboxes)
	mux.HandleFunc("POST /api/sandbox", f.createSandbox)
	mux.HandleFunc("GET /api/sandbox/ssh-access/validate", f.validateSSHAccess)
	mux.HandleFunc("GET /api/sandbox/{id}", f.onSandbox(f.getSandbox))
	mux.HandleFunc("DELETE /api/sandbox/{id}", f.onSandbox(f.deleteSandbox))
	mux.HandleFunc("POST /api/sandbox/{id}/start", f.onSandbox(f.startSandbox))
	mux.HandleFunc("POST /api/sandbox/{id}/stop", f.onSandbox(f.stopSandbox))
	mux.HandleFunc("POST /api/sandbox/{id}/ssh-access", f.onSandbox(f.createSSHAccess))
	mux.HandleFunc("DELETE /api/sandbox/{id}/ssh-access", f.onSandbox(f.revokeSSHAccess))
	mux.HandleFunc("POST /toolbox/{id}/process/execute", f.execute)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("Cannot %s %s", r.Method, r.URL.Path))
	})
	f.httpSrv = &http.Server{
		Handler:           f.front(mux),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return f.ctx },
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := f.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			f.logger.Error("daytonatest: serve the API", "error", err)
		}
	}()
	return nil
}

// front records every request, then answers 429 while throttled, 401
// without the API key and 403 for another organization, before next.
func (f *Fake) front(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, "cannot read the request body: "+err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		f.mu.Lock()
		f.requests = append(f.requests, Request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
		th := f.throttle
		if f.throttle.n > 0 {
			f.throttle.n--
		}
		f.mu.Unlock()
		f.logger.Debug("daytonatest: request", "method", r.Method, "path", r.URL.Path)

		if th.n > 0 {
			secs := int(math.Ceil(th.retryAfter.Seconds()))
			h := w.Header()
			h.Set("Retry-After", strconv.Itoa(secs))
			h.Set("X-RateLimit-Limit", "100")
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset", strconv.Itoa(secs))
			writeJSON(w, http.StatusTooManyRequests, map[string]any{"statusCode": http.StatusTooManyRequests, "message": "ThrottlerException: Too Many Requests"})
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+f.key {
			writeError(w, http.StatusUnauthorized, "Unauthorized")
			return
		}
		if org := r.Header.Get("X-Daytona-Organization-ID"); org != "" && org != f.org {
			writeError(w, http.StatusForbidden, "Forbidden resource: not a member of organization "+org)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"statusCode":500,"message":"Internal server error"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeError answers an error as the API does (NestJS): {statusCode,
// message, error}.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, api.ErrorBody{StatusCode: status, Message: msg, Error: http.StatusText(status)})
}

// lookupLocked finds a live (not destroyed) sandbox by id or name; the
// caller holds f.mu.
func (f *Fake) lookupLocked(idOrName string) *sandbox {
	if s, ok := f.boxes[idOrName]; ok && s.state != api.StateDestroyed {
		return s
	}
	for _, id := range f.order {
		if s := f.boxes[id]; s.name == idOrName && s.state != api.StateDestroyed {
			return s
		}
	}
	return nil
}

func notFound(w http.ResponseWriter, idOrName string) {
	writeError(w, http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", idOrName))
}

// answer is what a sandbox handler answers: a body with a 2xx status, or
// an error message with a 4xx one.
type answer struct {
	status int
	body   any
}

func refusal(status int, format string, args ...any) answer {
	return answer{status, fmt.Sprintf(format, args...)}
}

// onSandbox serves a request about the sandbox the path's {id} names (an
// id or a name; 404 when there is none): h runs with f.mu held, and its
// answer is written once the lock is released.
func (f *Fake) onSandbox(h func(r *http.Request, s *sandbox) answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		f.mu.Lock()
		s := f.lookupLocked(id)
		var a answer
		if s != nil {
			a = h(r, s)
		}
		f.mu.Unlock()
		switch {
		case s == nil:
			notFound(w, id)
		case a.status >= 400:
			writeError(w, a.status, a.body.(string))
		default:
			writeJSON(w, a.status, a.body)
		}
	}
}

// listSandboxes answers GET /sandbox: the live sandboxes carrying every
// label of the labels query (a JSON object), oldest first, a page of
// limit (1..200, default 100) from cursor.
func (f *Fake) listSandboxes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var labels map[string]string
	if v := q.Get("labels"); v != "" {
		if err := json.Unmarshal([]byte(v), &labels); err != nil {
			writeError(w, http.StatusBadRequest, "Invalid labels: must be a JSON object of strings: "+err.Error())
			return
		}
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.ParseFloat(v, 64)
		switch {
		case err != nil || math.IsNaN(n):
			writeError(w, http.StatusBadRequest, "limit must be a number")
			return
		case n < 1:
			writeError(w, http.StatusBadRequest, "limit must not be less than 1")
			return
		case n > 200:
			writeError(w, http.StatusBadRequest, "limit must not be greater than 200")
			return
		}
		limit = int(n)
	}
	offset := 0
	if v := q.Get("cursor"); v != "" {
		n, ok := decodeCursor(v)
		if !ok {
			writeError(w, http.StatusBadRequest, "Invalid cursor")
			return
		}
		offset = n
	}
	f.mu.Lock()
	var match []api.Sandbox
	for _, id := range f.order {
		s := f.boxes[id]
		if s.state == api.StateDestroyed || !hasLabels(s.labels, labels) {
			continue
		}
		match = append(match, s.view())
	}
	f.mu.Unlock()
	page := struct {
		Items      []map[string]any `json:"items"`
		NextCursor *string          `json:"nextCursor"`
	}{Items: []map[string]any{}}
	for i := offset; i < len(match) && i < offset+limit; i++ {
		page.Items = append(page.Items, listItem(match[i]))
	}
	if offset+limit < len(match) {
		c := encodeCursor(offset + limit)
		page.NextCursor = &c
	}
	writeJSON(w, http.StatusOK, page)
}

// listItem is a sandbox as a list shows it (SandboxListItem): without
// env and buildInfo, which only single-sandbox reads carry.
func listItem(sb api.Sandbox) map[string]any {
	b, _ := json.Marshal(sb)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	delete(m, "env")
	delete(m, "buildInfo")
	return m
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

func encodeCursor(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("offset:" + strconv.Itoa(offset)))
}

func decodeCursor(c string) (int, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimPrefix(string(b), "offset:"))
	if err != nil || n < 0 || !strings.HasPrefix(string(b), "offset:") {
		return 0, false
	}
	return n, true
}

// createSandbox answers POST /sandbox: the new sandbox in its first state
// (creating, or pending_build for a Dockerfile); it gets to started (or
// fails) in the background.
func (f *Fake) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSandbox
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "Invalid request body: "+err.Error())
		return
	}
	if req.Snapshot != "" && req.BuildInfo != nil {
		writeError(w, http.StatusBadRequest, "Cannot specify both a snapshot and buildInfo")
		return
	}
	if req.Snapshot != "" && (req.CPU != 0 || req.Memory != 0 || req.Disk != 0) {
		writeError(w, http.StatusBadRequest, "Cannot specify Sandbox resources when using a snapshot")
		return
	}
	if req.CPU < 0 || req.Memory < 0 || req.Disk < 0 {
		writeError(w, http.StatusBadRequest, "cpu, memory and disk must not be negative")
		return
	}
	var img, snapshot string
	var build *api.BuildInfo
	now := time.Now()
	if req.BuildInfo != nil {
		ref, ok := parseDockerfile(req.BuildInfo.DockerfileContent)
		if !ok {
			writeError(w, http.StatusBadRequest, "daytonatest builds only a Dockerfile of one line, FROM <image>; got "+strconv.Quote(req.BuildInfo.DockerfileContent))
			return
		}
		img = ref
		build = &api.BuildInfo{DockerfileContent: req.BuildInfo.DockerfileContent, ContextHashes: req.BuildInfo.ContextHashes, CreatedAt: now.UTC(), UpdatedAt: now.UTC(), SnapshotRef: ref}
	} else {
		snapshot = req.Snapshot
		if snapshot == "" {
			snapshot = DefaultSnapshot
		}
		var ok bool
		if img, ok = f.opts.Snapshots[snapshot]; !ok {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("Snapshot %s not found. Did you add it through the Daytona Dashboard?", snapshot))
			return
		}
	}
	user := req.User
	if user == "" {
		user = f.opts.User
	}
	if strings.ContainsAny(user, " \t\n'\"$`\\;&|<>()") {
		writeError(w, http.StatusBadRequest, "Invalid user name "+strconv.Quote(user))
		return
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		writeError(w, http.StatusServiceUnavailable, "shutting down")
		return
	}
	if req.Name != "" && f.lookupLocked(req.Name) != nil {
		writeError(w, http.StatusConflict, fmt.Sprintf("Sandbox with name %s already exists", req.Name))
		return
	}
	id := newUUID()
	s := &sandbox{
		id: id, name: req.Name, snapshot: snapshot, user: user,
		env: req.Env, labels: req.Labels,
		networkBlockAll: req.NetworkBlockAll,
		target:          defaultTarget,
		cpu:             defaultCPU, memory: defaultMemory, disk: defaultDisk,
		autoStop: defaultAutoStop, autoArchive: defaultAutoArchive, autoDelete: defaultAutoDelete,
		buildInfo:  build,
		toolboxURL: f.base + "/toolbox",
		orgID:      f.org,
		desired:    "started",
		createdAt:  now,
		image:      img,
	}
	if s.name == "" {
		s.name = id
	}
	if req.Public != nil {
		s.public = *req.Public
	}
	if req.Target != "" {
		s.target = req.Target
	}
	if req.CPU > 0 {
		s.cpu = float64(req.CPU)
	}
	if req.Memory > 0 {
		s.memory = float64(req.Memory)
	}
	if req.Disk > 0 {
		s.disk = float64(req.Disk)
	}
	if req.AutoStopInterval != nil {
		s.autoStop = float64(*req.AutoStopInterval)
	}
	if err := f.backend.prepare(s); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	var fail *failure
	if len(f.failNext) > 0 {
		fail = &f.failNext[0]
		f.failNext = f.failNext[1:]
	}
	f.boxes[id] = s
	f.order = append(f.order, id)
	steps, final, reason := f.createSteps(s, build != nil, fail)
	f.transition(s, steps, final, reason)
	writeJSON(w, http.StatusOK, s.view())
}

// parseDockerfile reads a Dockerfile of exactly one line, FROM <ref>.
func parseDockerfile(content string) (string, bool) {
	lines := strings.Split(strings.TrimSpace(content), "\n")
	if len(lines) != 1 {
		return "", false
	}
	fields := strings.Fields(lines[0])
	if len(fields) != 2 || !strings.EqualFold(fields[0], "FROM") {
		return "", false
	}
	return fields[1], true
}

func (f *Fake) getSandbox(_ *http.Request, s *sandbox) answer {
	return answer{http.StatusOK, s.view()}
}

// startSandbox starts a stopped sandbox: starting → started. A sandbox
// started, or on its way there, is answered as it is.
func (f *Fake) startSandbox(_ *http.Request, s *sandbox) answer {
	switch s.state {
	case api.StateStopped:
		s.desired = "started"
		f.transition(s, f.startSteps(), api.StateStarted, "")
	case api.StateError, api.StateBuildFailed:
		return refusal(http.StatusBadRequest, "Sandbox %s is in state %s and cannot be started: %s", s.id, s.state, s.errorReason)
	case api.StateStopping, api.StateDestroying:
		return refusal(http.StatusBadRequest, "Sandbox %s is %s: a state change is in progress", s.id, s.state)
	}
	return answer{http.StatusOK, s.view()}
}

// stopSandbox stops a started sandbox: stopping → stopped. A sandbox
// stopped, or stopping, is answered as it is.
func (f *Fake) stopSandbox(_ *http.Request, s *sandbox) answer {
	switch s.state {
	case api.StateStarted:
		s.desired = "stopped"
		f.transition(s, f.stopSteps(), api.StateStopped, "")
	case api.StateStopped, api.StateStopping:
	case api.StateError, api.StateBuildFailed:
		return refusal(http.StatusBadRequest, "Sandbox %s is in state %s and cannot be stopped: %s", s.id, s.state, s.errorReason)
	default:
		return refusal(http.StatusBadRequest, "Sandbox %s is %s: a state change is in progress", s.id, s.state)
	}
	return answer{http.StatusOK, s.view()}
}

// deleteSandbox destroys a sandbox in any state: destroying → destroyed
// (then GET answers 404).
func (f *Fake) deleteSandbox(_ *http.Request, s *sandbox) answer {
	if s.state != api.StateDestroying {
		s.desired = "destroyed"
		f.transition(s, f.destroySteps(s.op), api.StateDestroyed, "")
	}
	return answer{http.StatusOK, s.view()}
}
