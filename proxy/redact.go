package proxy

import (
	"bytes"
	"cmp"
	"net/http"
	"slices"
)

// Defence in depth: an upstream that reflects the request's headers, or
// echoes the key in an error ("invalid key sk-..."), must not hand the key
// to the sandbox. Every secret of the run is replaced in what the LLM
// routes send back: header names and values (1xx and trailers included)
// and the body, as it streams.

// redactMarker replaces a secret. It has a fixed length, so a response's
// body can change length: Content-Length is dropped from the LLM routes'
// responses (they go out chunked), rather than making the marker as long
// as the key, which would keep the length but read worse and vary.
const redactMarker = "[redacted]"

// minSecretLen is the shortest secret redacted. A shorter "key" is a
// placeholder for a keyless server ("EMPTY", "none", "dummy"), not a
// secret, and replacing it would mangle every answer that holds the word.
const minSecretLen = 8

// redactor finds a run's secrets in text. A nil *redactor redacts nothing.
type redactor struct {
	secrets [][]byte // distinct, longest first: at one position the longest wins
	maxLen  int
	first   [256]bool // the secrets' first bytes
}

// newRedactor returns a redactor for the secrets at least minSecretLen
// long, or nil if there are none.
func newRedactor(secrets ...string) *redactor {
	r := &redactor{}
	for _, s := range secrets {
		if len(s) < minSecretLen || slices.ContainsFunc(r.secrets, func(b []byte) bool { return string(b) == s }) {
			continue
		}
		r.secrets = append(r.secrets, []byte(s))
		r.maxLen = max(r.maxLen, len(s))
		r.first[s[0]] = true
	}
	if len(r.secrets) == 0 {
		return nil
	}
	slices.SortStableFunc(r.secrets, func(a, b []byte) int { return cmp.Compare(len(b), len(a)) })
	return r
}

// match returns where the leftmost secret in b starts and how long it is
// (the longest, if several start there), or -1 and 0.
func (r *redactor) match(b []byte) (at, n int) {
	at = -1
	for _, s := range r.secrets {
		lim := b
		if at >= 0 {
			lim = b[:min(len(b), at+len(s)-1)] // only an earlier start can win
		}
		if i := bytes.Index(lim, s); i >= 0 && (at < 0 || i < at) {
			at, n = i, len(s)
		}
	}
	return at, n
}

// partial returns where the longest suffix of b that is the beginning of a
// secret (but not all of it) starts, or len(b) if there is none: those
// bytes cannot be judged until more arrive.
func (r *redactor) partial(b []byte) int {
	for i := max(0, len(b)-r.maxLen+1); i < len(b); i++ {
		if !r.first[b[i]] {
			continue
		}
		for _, s := range r.secrets {
			if len(s) > len(b)-i && bytes.HasPrefix(s, b[i:]) {
				return i
			}
		}
	}
	return len(b)
}

// redact appends b to dst with every secret replaced by redactMarker and
// returns how many bytes of b it consumed: all of them when final, else
// all but a suffix that may begin a secret, which the caller passes again
// with what follows.
func (r *redactor) redact(dst, b []byte, final bool) ([]byte, int) {
	pos := 0
	for {
		rest := b[pos:]
		at, n := r.match(rest)
		hold := len(rest)
		if !final {
			hold = r.partial(rest)
		}
		if at < 0 || hold <= at {
			return append(dst, rest[:hold]...), pos + hold
		}
		dst = append(dst, rest[:at]...)
		dst = append(dst, redactMarker...)
		pos += at + n
	}
}

// replace returns s with every secret replaced.
func (r *redactor) replace(s string) string {
	if r == nil {
		return s
	}
	if at, _ := r.match([]byte(s)); at < 0 {
		return s
	}
	out, _ := r.redact(nil, []byte(s), true)
	return string(out)
}

// header replaces the secrets in h's values, and drops a header whose name
// holds one (a marker would not be a valid name).
func (r *redactor) header(h http.Header) {
	if r == nil {
		return
	}
	for k, vs := range h {
		if r.replace(k) != k {
			delete(h, k)
			continue
		}
		for i, v := range vs {
			vs[i] = r.replace(v)
		}
	}
}

// wrap returns w redacting the run's secrets from the response, and a
// function to call when the handler is done: it sends what was held back
// and redacts the trailers.
func (r *redactor) wrap(w http.ResponseWriter) (http.ResponseWriter, func()) {
	if r == nil {
		return w, func() {}
	}
	rw := &redactingWriter{ResponseWriter: w, r: r}
	return rw, rw.finish
}

// redactingWriter is a ResponseWriter that redacts secrets in headers when
// they are written and in the body as it streams: each write goes out at
// once, but for a last few bytes that may begin a secret (at most its
// length less one, and only when they match its beginning), which wait
// for the next write or the end.
type redactingWriter struct {
	http.ResponseWriter
	r       *redactor
	held    []byte // the end of the body so far, which may begin a secret
	buf     []byte // held + the latest write
	out     []byte // the latest write, redacted
	started bool   // the final header was written
	err     error  // from the underlying writer
}

func (w *redactingWriter) WriteHeader(code int) {
	if !w.started {
		w.r.header(w.Header())
		if code >= 200 {
			w.started = true
			w.Header().Del("Content-Length")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *redactingWriter) Write(p []byte) (int, error) {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	data := p
	if len(w.held) > 0 {
		w.buf = append(append(w.buf[:0], w.held...), p...)
		data = w.buf
	}
	var n int
	w.out, n = w.r.redact(w.out[:0], data, false)
	w.held = append(w.held[:0], data[n:]...)
	if len(w.out) > 0 {
		if _, w.err = w.ResponseWriter.Write(w.out); w.err != nil {
			return 0, w.err
		}
	}
	return len(p), nil
}

// Flush sends what was written, but for the bytes held back.
func (w *redactingWriter) Flush() {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *redactingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *redactingWriter) finish() {
	if len(w.held) > 0 && w.err == nil {
		w.out, _ = w.r.redact(w.out[:0], w.held, true)
		w.held = w.held[:0]
		_, w.err = w.ResponseWriter.Write(w.out)
	}
	// Trailers are set in the header after the body, and sent when the
	// handler returns.
	w.r.header(w.Header())
}
