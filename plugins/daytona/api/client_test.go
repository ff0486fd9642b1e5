package api

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

func TestRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{"seconds", map[string]string{"Retry-After": "3"}, 3 * time.Second},
		{"fraction", map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond},
		{"reset in seconds", map[string]string{"X-RateLimit-Reset": "2"}, 2 * time.Second},
		{"Retry-After first", map[string]string{"Retry-After": "1", "X-RateLimit-Reset": "9"}, time.Second},
		{"neither", map[string]string{"X-RateLimit-Remaining": "0"}, 0},
		{"garbage", map[string]string{"Retry-After": "soon"}, 0},
		// Daytona's named throttlers (@nestjs/throttler): the refusing one
		// sends Retry-After-<name>.
		{"named throttler", map[string]string{"Retry-After-sandbox-lifecycle": "4"}, 4 * time.Second},
		{"named Retry-After wins over resets", map[string]string{"Retry-After-authenticated": "2", "X-RateLimit-Remaining-sandbox-create": "0", "X-RateLimit-Reset-sandbox-create": "7"}, 2 * time.Second},
		{"longest Retry-After", map[string]string{"Retry-After-authenticated": "2", "Retry-After-sandbox-create": "6"}, 6 * time.Second},
		{"named reset of a full window", map[string]string{"X-RateLimit-Remaining-authenticated": "0", "X-RateLimit-Reset-authenticated": "3"}, 3 * time.Second},
		{"named reset of a window with room", map[string]string{"X-RateLimit-Remaining-authenticated": "12", "X-RateLimit-Reset-authenticated": "30"}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			if got := retryAfter(h); got != tt.want {
				t.Errorf("retryAfter = %v, want %v", got, tt.want)
			}
		})
	}
	// A reset given as a Unix time, a few seconds ahead.
	h := http.Header{}
	h.Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(5*time.Second).Unix(), 10))
	if got := retryAfter(h); got <= 3*time.Second || got > 5*time.Second {
		t.Errorf("retryAfter of a Unix reset = %v, want about 5 s", got)
	}
}

func TestErrorMessage(t *testing.T) {
	for _, tt := range []struct{ body, want string }{
		{`{"statusCode":404,"message":"Sandbox with ID or name x not found","error":"Not Found"}`, "Sandbox with ID or name x not found"},
		{`{"statusCode":400,"message":["cpu must be an integer","memory must be an integer"],"error":"Bad Request"}`, "cpu must be an integer; memory must be an integer"},
		{`{"statusCode":401,"error":"Unauthorized"}`, "Unauthorized"},
		{`upstream connect error`, "upstream connect error"},
		{``, "(no message)"},
	} {
		if got := message([]byte(tt.body)); got != tt.want {
			t.Errorf("message(%s) = %q, want %q", tt.body, got, tt.want)
		}
	}
}

func TestErrorKinds(t *testing.T) {
	for status, kind := range map[int]error{
		400: sdk.ErrInvalid, 401: sdk.ErrPermission, 403: sdk.ErrPermission, 404: sdk.ErrNotFound,
		409: sdk.ErrConflict, 429: sdk.ErrUnavailable, 503: sdk.ErrUnavailable,
	} {
		err := &Error{Method: "GET", Path: "/api/sandbox", Status: status, Message: "m"}
		if !errors.Is(err, kind) {
			t.Errorf("%d is not %v", status, kind)
		}
	}
	err := &Error{Method: "POST", Path: "/api/sandbox", Status: 400, Message: "Snapshot x not found"}
	if got, want := err.Error(), "daytona POST /api/sandbox: 400 Bad Request: Snapshot x not found"; got != want {
		t.Errorf("error %q, want %q", got, want)
	}
}

func TestNewRefusesBadInput(t *testing.T) {
	if _, err := New(Options{BaseURL: "ftp://x", APIKey: "k"}); !errors.Is(err, sdk.ErrInvalid) {
		t.Errorf("ftp URL: %v", err)
	}
	if _, err := New(Options{APIKey: ""}); !errors.Is(err, sdk.ErrInvalid) {
		t.Errorf("no key: %v", err)
	}
}
