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
	case started && s.state != api.StateStarted:
		return s, "sandbox " + string(s.state)
	}
	return s, ""
}

// createSSHAccess answers POST /sandbox/{id}/ssh-access?expiresInMinutes=N
// (default 60; Options.TokenTTL instead when set).
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
	now := time.Now()
	tk := &token{id: newUUID(), value: randomHex(24), sandboxID: s.id, createdAt: now, expiresAt: now.Add(ttl)}
	f.tokens[tk.value] = tk
	f.stats.TokensIssued++
	host, port, _ := net.SplitHostPort(f.gateway)
	return answer{http.StatusOK, api.SSHAccess{
		ID:         tk.id,
		SandboxID:  tk.sandboxID,
		Token:      tk.value,
		ExpiresAt:  tk.expiresAt.UTC(),
		CreatedAt:  tk.createdAt.UTC(),
		UpdatedAt:  tk.createdAt.UTC(),
		SSHCommand: fmt.Sprintf("ssh -p %s %s@%s", port, tk.value, host),
	}}
}

// revokeSSHAccess answers DELETE /sandbox/{id}/ssh-access?token=T: it
// revokes T, or every token of the sandbox without one.
func (f *Fake) revokeSSHAccess(r *http.Request, s *sandbox) answer {
	value := r.URL.Query().Get("token")
	for _, tk := range f.tokens {
		if tk.sandboxID == s.id && !tk.revoked && (value == "" || tk.value == value) {
			tk.revoked = true
			f.stats.TokensRevoked++
		}
	}
	return answer{http.StatusOK, s.view()}
}

// validateSSHAccess answers GET /sandbox/ssh-access/validate?token=T.
func (f *Fake) validateSSHAccess(w http.ResponseWriter, r *http.Request) {
	value := r.URL.Query().Get("token")
	if value == "" {
		writeError(w, http.StatusBadRequest, "token is required")
		return
	}
	f.mu.Lock()
	s, why := f.checkTokenLocked(value, false)
	res := api.SSHAccessValidation{Valid: why == ""}
	if s != nil {
		res.SandboxID = s.id
	} else if tk, ok := f.tokens[value]; ok {
		res.SandboxID = tk.sandboxID
	}
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, res)
}
