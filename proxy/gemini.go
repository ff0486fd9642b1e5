package proxy

import (
	"net/http"
	"net/url"
)

// The Gemini route: Google's Gemini API (generateContent,
// streamGenerateContent, countTokens, the models list), which the Gemini
// CLI speaks, forwarded untranslated to the profile's llm.gemini upstream.
// The sandbox's clients send the run token where Google's SDK sends its
// key, in x-goog-api-key; the proxy replaces it with the host's key on the
// way out, and drops a ?key= query parameter (the other place Google takes
// a key), which it never takes as the token: a token in a URL ends up in
// logs.

// routeGemini names the Gemini route in the audit log.
const routeGemini = "gemini"

// geminiPrefix is the Gemini route's path prefix: /gemini/v1beta/X goes
// to the upstream's base URL + /v1beta/X.
const geminiPrefix = "/gemini/"

// serveGemini forwards a request on the Gemini route, or says the profile
// has no Gemini upstream.
func (r *Run) serveGemini(w http.ResponseWriter, req *http.Request, rec *Record) {
	if r.gemini == nil {
		writeError(w, routeGemini, http.StatusNotFound, "not_found",
			"profile "+r.cfg.Profile+" has no llm.gemini block, so the proxy has no Gemini API upstream for "+req.URL.Path+
				" (it does not translate Gemini's API to another): add an llm.gemini block to the profile (base_url, api_key_env)")
		return
	}
	r.gemini.serve(w, req, rec, nil)
}

// geminiError is Google's error body: {"error": {"code", "message",
// "status"}}, status the canonical code Google answers the HTTP status
// with.
func geminiError(status int, msg string) any {
	return map[string]any{"error": map[string]any{"code": status, "message": msg, "status": geminiStatus(status)}}
}

// geminiStatus is the canonical error code (google.rpc.Code) Google's APIs
// name in an error of HTTP status code; one without a counterpart is
// UNKNOWN.
func geminiStatus(code int) string {
	switch code {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusConflict:
		return "ABORTED"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case 499:
		return "CANCELLED"
	case http.StatusInternalServerError:
		return "INTERNAL"
	case http.StatusNotImplemented:
		return "UNIMPLEMENTED"
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	return "UNKNOWN"
}

// withoutKeyParam is a raw query without its key parameters, as it was
// otherwise.
func withoutKeyParam(raw string) string {
	if raw == "" {
		return raw
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		// Unparsable: nothing of it is forwarded but what parses.
		q.Del("key")
		return q.Encode()
	}
	if !q.Has("key") {
		return raw
	}
	q.Del("key")
	return q.Encode()
}
