package proxy

import (
	"encoding/json"
	"net/http"
)

// writeError answers with a JSON error body in the shape the route's
// clients parse, so the worker (go-openai) or an Anthropic client shows the
// message: OpenAI's {"error": {"message", "type", "code"}}, Anthropic's
// {"type": "error", "error": {"type", "message"}}, or Google's {"error":
// {"code", "message", "status"}} (see geminiError). Messages never hold a
// key or token.
func writeError(w http.ResponseWriter, route string, status int, code, msg string) {
	var body any
	switch route {
	case routeAnthropic:
		body = map[string]any{"type": "error", "error": map[string]string{"type": code, "message": msg}}
	case routeGemini:
		body = geminiError(status, msg)
	default:
		body = map[string]any{"error": map[string]string{"message": msg, "type": "amelia_proxy_error", "code": code}}
	}
	b, _ := json.Marshal(body)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
