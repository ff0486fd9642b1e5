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
	"slices"
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
	mux.HandleFunc("POST /api/sandbox/{id}/last-activity", f.onSandbox(f.updateLastActivity))
	mux.HandleFunc("POST /api/sandbox/{id}/autostop/{interval}", f.onSandbox(f.setAutoStopInterval))
	mux.HandleFunc("GET /api/runners/by-sandbox/{id}", f.onSandbox(f.runnerBySandbox))
	mux.HandleFunc("POST /api/snapshots", f.createSnapshot)
	mux.HandleFunc("GET /api/snapshots", f.listSnapshots)
	mux.HandleFunc("GET /api/snapshots/{id}", f.getSnapshot)
	mux.HandleFunc("DELETE /api/snapshots/{id}", f.deleteSnapshot)
	mux.HandleFunc("POST /toolbox/{id}/process/execute", f.execute)
	mux.HandleFunc("POST /toolbox/{id}/files/bulk-upload", f.bulkUpload)
	mux.HandleFunc("POST /toolbox/{id}/files/bulk-download", f.bulkDownload)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("Cannot %s %s", r.Method, r.URL.Path))
	})
	f.mux = mux
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

// gatewayRoutes are what Daytona's SSH gateway calls (apps/ssh-gateway
// main.go), with its own key: validating a token and finding the
// sandbox's runner need that key (SshGatewayAuthContextGuard), reading
// the sandbox and its activity take it as well as an organization's.
var gatewayRoutes = map[string]bool{
	"GET /api/sandbox/ssh-access/validate": true, // the gateway's key only
	"GET /api/runners/by-sandbox/{id}":     true, // the gateway's key only
	"GET /api/sandbox/{id}":                false,
	"POST /api/sandbox/{id}/last-activity": false,
}

// throttlerOf is the throttler of Daytona's API that limits a route: its
// sandbox routes opt into sandbox-create (creating) or sandbox-lifecycle
// (start, stop, delete...) and skip authenticated, which limits the rest
// (sandbox.controller.ts @ThrottlerScope, app.module.ts).
func throttlerOf(pattern string) string {
	switch pattern {
	case "POST /api/sandbox":
		return "sandbox-create"
	case "DELETE /api/sandbox/{id}", "POST /api/sandbox/{id}/start", "POST /api/sandbox/{id}/stop":
		return "sandbox-lifecycle"
	}
	return "authenticated"
}

// front records every request, then answers 429 while throttled, 401
// without one of the fake's keys, 403 for another organization or a key
// used where it does not belong, before next.
func (f *Fake) front(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := f.mux.Handler(r)
		var body []byte // not recorded for streamed routes
		if !streamedRoutes[pattern] {
			var err error
			if body, err = io.ReadAll(r.Body); err != nil {
				writeError(w, http.StatusBadRequest, "cannot read the request body: "+err.Error())
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		f.mu.Lock()
		f.requests = append(f.requests, Request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
		th := f.throttle
		if f.throttle.n > 0 {
			f.throttle.n--
		}
		f.mu.Unlock()
		f.logger.Debug("daytonatest: request", "method", r.Method, "path", r.URL.Path)

		if th.n > 0 {
			// @nestjs/throttler names its headers after the throttler that
			// refused (Retry-After-<name>, in whole seconds); the bare
			// names belong to a throttler named "default", which
			// Daytona's API does not have.
			secs := int(math.Ceil(th.retryAfter.Seconds()))
			// Set as written, not canonicalized: Node sends header names
			// as the guard spells them.
			w.Header()["Retry-After-"+throttlerOf(pattern)] = []string{strconv.Itoa(secs)}
			writeJSON(w, http.StatusTooManyRequests, map[string]any{"statusCode": http.StatusTooManyRequests, "message": "ThrottlerException: Too Many Requests"})
			return
		}
		gatewayOnly, gatewayMay := gatewayRoutes[pattern]
		switch r.Header.Get("Authorization") {
		case "Bearer " + f.key:
			if gatewayOnly {
				writeError(w, http.StatusForbidden, "Invalid authentication context")
				return
			}
			if org := r.Header.Get("X-Daytona-Organization-ID"); org != "" && org != f.org {
				writeError(w, http.StatusForbidden, "Forbidden resource: not a member of organization "+org)
				return
			}
		case "Bearer " + f.gatewayKey:
			if !gatewayMay {
				writeError(w, http.StatusForbidden, "Invalid authentication context")
				return
			}
		default:
			writeError(w, http.StatusUnauthorized, "Unauthorized")
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

// lookupLocked finds a sandbox as GET does, by id, else by name: not
// destroyed, nor failed and being deleted (sandbox.service.ts
// findOneByIdOrName). A deleted sandbox has a new name, so its old one
// finds nothing. The caller holds f.mu.
func (f *Fake) lookupLocked(idOrName string) *sandbox {
	if s, ok := f.boxes[idOrName]; ok && s.visible() {
		return s
	}
	for _, id := range f.order {
		if s := f.boxes[id]; s.name == idOrName && s.visible() {
			return s
		}
	}
	return nil
}

// lookupCachedLocked is lookupLocked through Daytona's lookup cache: a
// name no sandbox had when it was last looked for is still not found
// until the miss expires or a sandbox of that name changes
// (Options.LookupCacheTTL). The caller holds f.mu.
func (f *Fake) lookupCachedLocked(idOrName string) *sandbox {
	if s, ok := f.boxes[idOrName]; ok && s.visible() {
		return s
	}
	if at, ok := f.misses[idOrName]; ok && time.Since(at) < f.opts.LookupCacheTTL {
		return nil
	}
	s := f.lookupLocked(idOrName)
	if s == nil && f.opts.LookupCacheTTL > 0 {
		f.misses[idOrName] = time.Now()
	}
	return s
}

func notFound(w http.ResponseWriter, idOrName string) {
	writeError(w, http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", idOrName))
}

// answer is what a sandbox handler answers: a body with a 2xx status, or
// an error message with a 4xx one; or, when then is set, what then
// answers once the fake's lock is released (a start waits there).
type answer struct {
	status int
	body   any
	then   func() answer
}

func refusal(status int, format string, args ...any) answer {
	return answer{status: status, body: fmt.Sprintf(format, args...)}
}

// onSandbox serves a request about the sandbox the path's {id} names (an
// id or a name; 404 when there is none): h runs with f.mu held, and its
// answer is written once the lock is released.
func (f *Fake) onSandbox(h func(r *http.Request, s *sandbox) answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		f.mu.Lock()
		s := f.lookupCachedLocked(id)
		var a answer
		if s != nil {
			a = h(r, s)
		}
		f.mu.Unlock()
		if a.then != nil {
			a = a.then()
		}
		switch {
		case s == nil:
			notFound(w, id)
		case a.status >= 400:
			writeError(w, a.status, a.body.(string))
		case a.body == nil:
			w.WriteHeader(a.status)
		default:
			writeJSON(w, a.status, a.body)
		}
	}
}

// listSandboxes answers GET /sandbox: the sandboxes carrying every label
// of the labels query (a JSON object), a page of limit (1..200, default
// 100) from cursor. Like Daytona's, it answers from a search index that
// lags (Options.ListLag): a sandbox created since is missing, one
// destroyed since is still there, states are old; and it shows states as
// stored (a deleted sandbox keeps its state, with desiredState destroyed),
// leaves out destroyed sandboxes and failed ones being deleted, and sorts
// by last activity, latest first, then by id (the OpenSearch adapter's
// defaults, sandbox-opensearch-search.adapter.ts).
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
	asOf := f.indexedUpToLocked()
	var match []api.Sandbox
	for _, id := range f.order {
		sb, ok := f.boxes[id].indexedAt(asOf)
		if !ok || sb.State == api.StateDestroyed || sb.State.Failed() && sb.DesiredState == api.DesiredDestroyed || !hasLabels(sb.Labels, labels) {
			continue
		}
		match = append(match, sb)
	}
	f.mu.Unlock()
	slices.SortStableFunc(match, func(a, b api.Sandbox) int {
		if c := strings.Compare(b.LastActivityAt, a.LastActivityAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
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
		f.mu.Lock()
		snap := f.snapshotLocked(snapshot)
		var state api.SnapshotState
		if snap != nil {
			img, state = snap.image, snap.state
		}
		f.mu.Unlock()
		switch {
		case snap == nil:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("Snapshot %s not found. Did you add it through the Daytona Dashboard?", snapshot))
			return
		case state != api.SnapshotActive:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("Snapshot %s is %s", snapshot, state))
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
	// The database's unique name, not the lookup cache.
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
		buildInfo:    build,
		toolboxURL:   f.base + "/toolbox",
		orgID:        f.org,
		class:        api.ClassContainer,
		desired:      api.DesiredStarted,
		createdAt:    now,
		lastActivity: f.activityLocked(),
		image:        img,
	}
	if c, ok := f.opts.SnapshotClasses[snapshot]; ok && snapshot != "" {
		s.class = c
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
	return answer{status: http.StatusOK, body: s.view()}
}

// startSandbox starts a stopped sandbox, or resumes a paused VM, as
// Daytona's start does (sandbox.service.ts start): a started one is
// answered as it is; a failed one is refused (400), as is one whose state
// is changing (409), one in another state (400) and a paused one that is
// not a VM (422). Then, as Daytona's controller does, it holds the answer
// until the sandbox is started (400 when it fails instead), or
// Options.StartWait has passed: the answer then shows the change still
// under way.
func (f *Fake) startSandbox(_ *http.Request, s *sandbox) answer {
	switch {
	case s.state == api.StateStarted && s.desired == api.DesiredStarted:
		return answer{status: http.StatusOK, body: s.view()}
	case s.state.Failed():
		return refusal(http.StatusBadRequest, "Sandbox is in an errored state")
	case s.pending():
		return refusal(http.StatusConflict, "Sandbox state change in progress")
	case s.state != api.StateStopped && s.state != api.StatePaused:
		return refusal(http.StatusBadRequest, "Sandbox is not in valid state")
	case s.state == api.StatePaused && !s.vm():
		return refusal(http.StatusUnprocessableEntity, "Resuming is not supported for this sandbox")
	}
	s.desired = api.DesiredStarted
	s.lastActivity = f.activityLocked() // a lifecycle change is activity
	op := f.transition(s, f.startSteps(s), api.StateStarted, "")
	return answer{then: func() answer {
		t := time.NewTimer(f.opts.StartWait)
		defer t.Stop()
		select {
		case <-op.done:
		case <-t.C:
		case <-f.ctx.Done():
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if s.state.Failed() {
			return refusal(http.StatusBadRequest, "Sandbox failed to start: %s", s.errorReason)
		}
		return answer{status: http.StatusOK, body: s.view()}
	}}
}

// stopSandbox stops a started or paused sandbox, as Daytona's stop does
// (sandbox.service.ts stop): a failed one is refused (400), as is one
// whose state is changing (409) and one in another state, stopped
// included (400). The answer shows the change asked for, not its end.
func (f *Fake) stopSandbox(_ *http.Request, s *sandbox) answer {
	switch {
	case s.state.Failed():
		return refusal(http.StatusBadRequest, "Sandbox is in an errored state")
	case s.pending():
		return refusal(http.StatusConflict, "Sandbox state change in progress")
	case s.state != api.StateStarted && s.state != api.StatePaused:
		return refusal(http.StatusBadRequest, "Sandbox is not in a stoppable state")
	}
	s.desired = api.DesiredStopped
	f.transition(s, f.stopSteps(s), api.StateStopped, "")
	return answer{status: http.StatusOK, body: s.view()}
}

// deleteSandbox deletes a sandbox as Daytona does (sandbox.service.ts
// destroy): refused (409) while a state change is pending, unless it
// waits for a build; else softly, at once: the sandbox keeps its state,
// gets desiredState destroyed and the name DESTROYED_<name>_<ms>
// (sandbox.entity.ts getSoftDeleteUpdate), so its name is free again; it
// is destroyed in the background (then GET answers 404).
func (f *Fake) deleteSandbox(_ *http.Request, s *sandbox) answer {
	if s.pending() && s.state != api.StatePendingBuild {
		return refusal(http.StatusConflict, "Sandbox state change in progress")
	}
	s.desired = api.DesiredDestroyed
	delete(f.misses, s.name) // the update clears its old name's lookups too
	s.name = fmt.Sprintf("DESTROYED_%s_%d", s.name, time.Now().UnixMilli())
	f.transition(s, f.destroySteps(s, s.op), api.StateDestroyed, "")
	return answer{status: http.StatusOK, body: s.view()}
}

// updateLastActivity answers POST /sandbox/{id}/last-activity, which
// Daytona's SSH gateway sends while a session is open: 201, no body.
func (f *Fake) updateLastActivity(r *http.Request, s *sandbox) answer {
	if len(bytes.TrimSpace(mustBody(r))) > 0 {
		var body struct {
			ActivityType string `json:"activityType"`
		}
		if err := json.Unmarshal(mustBody(r), &body); err != nil {
			return refusal(http.StatusBadRequest, "Invalid request body: %v", err)
		}
	}
	s.lastActivity = f.activityLocked()
	f.changedLocked(s)
	return answer{status: http.StatusCreated}
}

// setAutoStopInterval answers POST /sandbox/{id}/autostop/{interval}:
// the sandbox's autoStopInterval becomes interval minutes (0 never stops
// it), whatever its state, and its activity is left as it was
// (sandbox.service.ts setAutostopInterval, resolveAutoStopInterval).
func (f *Fake) setAutoStopInterval(r *http.Request, s *sandbox) answer {
	minutes, err := strconv.ParseFloat(r.PathValue("interval"), 64)
	if err != nil || !(minutes >= 0) { // NaN too
		return refusal(http.StatusBadRequest, "Auto-stop interval must be non-negative")
	}
	s.autoStop = minutes
	f.changedLocked(s)
	return answer{status: http.StatusOK, body: s.view()}
}

// runnerBySandbox answers GET /runners/by-sandbox/{sandboxId}: the
// runner the sandbox runs on (RunnerFull), whose domain Daytona's SSH
// gateway dials on port 2220 (Options.RunnerDomain). The fake has one
// runner; its apiKey is made up, as Daytona's is a secret.
func (f *Fake) runnerBySandbox(_ *http.Request, s *sandbox) answer {
	now := f.started.UTC().Format(isoTime)
	return answer{status: http.StatusOK, body: map[string]any{
		"id":            f.runnerID,
		"domain":        f.opts.RunnerDomain,
		"cpu":           4,
		"memory":        8,
		"disk":          50,
		"sandboxClass":  s.class,
		"region":        s.target,
		"name":          "daytonatest",
		"state":         "ready",
		"unschedulable": false,
		"tags":          []string{},
		"createdAt":     now,
		"updatedAt":     now,
		"version":       "0",
		"apiVersion":    "0",
		"runnerClass":   "container",
		"apiKey":        f.runnerKey,
	}}
}

// activityLocked is the time of an activity now: at least a millisecond
// (the resolution of Daytona's times) after the one before, so that the
// list's order is the order activities happened in, never a tie. The
// caller holds f.mu.
func (f *Fake) activityLocked() time.Time {
	t := time.Now().Truncate(time.Millisecond)
	if next := f.lastActivity.Add(time.Millisecond); t.Before(next) {
		t = next
	}
	f.lastActivity = t
	return t
}

// mustBody is the request's body, which front has read into memory.
func mustBody(r *http.Request) []byte {
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b
}
