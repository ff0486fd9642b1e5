package daytonatest

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
)

// token is an SSH access token: the user name to log in to the gateway
// with.
type token struct {
	id, value, sandboxID string
	createdAt, expiresAt time.Time
	revoked              bool
}

// checkTokenLocked says why a token cannot log in ("" when it can) and
// whose it is; the caller holds f.mu. started also requires its sandbox
// to be started, as the gateway does.
func (f *Fake) checkTokenLocked(value string, started bool) (*sandbox, string) {
	tk, ok := f.tokens[value]
	switch {
	case !ok:
		return nil, "unknown token"
	case tk.revoked:
		return nil, "revoked token"
	case !time.Now().Before(tk.expiresAt):
		return nil, "expired token"
	}
	s := f.boxes[tk.sandboxID]
	switch {
	case s == nil || s.state == api.StateDestroyed:
		return nil, "sandbox destroyed"
	case started && s.shownState() != api.StateStarted:
		// As Daytona's gateway reads it from GET /sandbox/{id}: a
		// sandbox being stopped or deleted is no longer started.
		return s, "sandbox " + string(s.shownState())
	}
	return s, ""
}

// createSSHAccess answers POST /sandbox/{id}/ssh-access?expiresInMinutes=N
// (default 60; Options.TokenTTL instead when set). Like Daytona's, it
// revokes every other token of the sandbox first (sandbox.service.ts
// createSshAccess), unless Options.KeepOtherTokens: two clients that each
// mint their own token lock each other out of new logins.
func (f *Fake) createSSHAccess(r *http.Request, s *sandbox) answer {
	ttl := 60 * time.Minute
	if v := r.URL.Query().Get("expiresInMinutes"); v != "" {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(n) || n <= 0 {
			return refusal(http.StatusBadRequest, "expiresInMinutes must be a positive number")
		}
		ttl = time.Duration(n * float64(time.Minute))
	}
	if f.opts.TokenTTL > 0 {
		ttl = f.opts.TokenTTL
	}
	if !f.opts.KeepOtherTokens {
		f.revokeLocked(s, "")
	}
	now := time.Now()
	tk := &token{id: newUUID(), value: randomHex(24), sandboxID: s.id, createdAt: now, expiresAt: now.Add(ttl)}
	f.tokens[tk.value] = tk
	f.stats.TokensIssued++
	host, port, _ := net.SplitHostPort(f.gateway)
	return answer{status: http.StatusOK, body: api.SSHAccess{
		ID:         tk.id,
		SandboxID:  tk.sandboxID,
		Token:      tk.value,
		ExpiresAt:  tk.expiresAt.UTC(),
		CreatedAt:  tk.createdAt.UTC(),
		UpdatedAt:  tk.createdAt.UTC(),
		SSHCommand: fmt.Sprintf("ssh -p %s %s@%s", port, tk.value, host),
	}}
}

// revokeLocked revokes the sandbox's token value, or all of them when
// value is "". Daytona deletes them: a revoked token is unknown after.
// The caller holds f.mu.
func (f *Fake) revokeLocked(s *sandbox, value string) {
	for _, tk := range f.tokens {
		if tk.sandboxID == s.id && !tk.revoked && (value == "" || tk.value == value) {
			tk.revoked = true
			f.stats.TokensRevoked++
		}
	}
}

// revokeSSHAccess answers DELETE /sandbox/{id}/ssh-access?token=T: it
// revokes T, or every token of the sandbox without one.
func (f *Fake) revokeSSHAccess(r *http.Request, s *sandbox) answer {
	f.revokeLocked(s, r.URL.Query().Get("token"))
	return answer{status: http.StatusOK, body: s.view()}
}

// validateSSHAccess answers GET /sandbox/ssh-access/validate?token=T as
// Daytona's does (sandbox.service.ts validateSshAccess), for its SSH
// gateway: valid, with the sandbox's id, when the token exists (not
// revoked) and has not expired, whatever the sandbox's state (the gateway
// asks GET /sandbox/{id} for that); else not valid, with sandboxId null.
func (f *Fake) validateSSHAccess(w http.ResponseWriter, r *http.Request) {
	value := r.URL.Query().Get("token")
	if value == "" {
		writeError(w, http.StatusBadRequest, "token is required")
		return
	}
	f.mu.Lock()
	tk, ok := f.tokens[value]
	valid := ok && !tk.revoked && time.Now().Before(tk.expiresAt)
	f.mu.Unlock()
	res := map[string]any{"valid": valid, "sandboxId": nil}
	if valid {
		res["sandboxId"] = tk.sandboxID
	}
	writeJSON(w, http.StatusOK, res)
}
