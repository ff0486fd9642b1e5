package proxy

import (
	"bytes"
	"cmp"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// redactInPieces streams data through a redactingWriter in pieces of the
// given sizes (cycled; 0 is read as 1) and returns what it sent.
func redactInPieces(r *redactor, data []byte, sizes []int) string {
	rec := httptest.NewRecorder()
	w, finish := r.wrap(rec)
	for i := 0; len(data) > 0; i++ {
		n := min(len(data), max(1, sizes[i%len(sizes)]))
		w.Write(data[:n])
		data = data[n:]
	}
	finish()
	return rec.Body.String()
}

// reference redacts with strings.Replacer, which replaces the leftmost
// match and, among matches at one position, the one given first: longest
// first, that is leftmost-longest.
func reference(secrets []string, s string) string {
	var kept []string
	for _, k := range secrets {
		if len(k) >= minSecretLen && !slices.Contains(kept, k) {
			kept = append(kept, k)
		}
	}
	if len(kept) == 0 {
		return s
	}
	slices.SortStableFunc(kept, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	var args []string
	for _, k := range kept {
		args = append(args, k, redactMarker)
	}
	return strings.NewReplacer(args...).Replace(s)
}

func TestRedact(t *testing.T) {
	const key = "sk-proj-abcdef123456"
	tests := []struct {
		name    string
		secrets []string
		in      string
		want    string
	}{
		{"no secrets", nil, "sk-proj-abcdef123456", "sk-proj-abcdef123456"},
		{"empty key is no key", []string{""}, "anything", "anything"},
		{"short key is not a secret", []string{"EMPTY"}, "EMPTY or not", "EMPTY or not"},
		{"alone", []string{key}, key, "[redacted]"},
		{"in the middle", []string{key}, `{"message":"invalid key ` + key + `"}`, `{"message":"invalid key [redacted]"}`},
		{"twice, adjacent", []string{key}, key + key, "[redacted][redacted]"},
		{"almost", []string{key}, "sk-proj-abcdef12345X sk-proj-abcdef12345", "sk-proj-abcdef12345X sk-proj-abcdef12345"},
		{"after a false start", []string{key}, "sk-proj-sk-proj-abcdef123456!", "sk-proj-[redacted]!"},
		{"self-overlapping", []string{"aaaaaaaa"}, strings.Repeat("a", 17), "[redacted][redacted]a"},
		{"several", []string{key, "ghp_token0123456789"}, "a " + key + " b ghp_token0123456789 c", "a [redacted] b [redacted] c"},
		{"one a prefix of the other", []string{key, key + "-longer"}, key + "-longer " + key + "-long", "[redacted] [redacted]-long"},
		{"overlapping keys: leftmost wins", []string{"abcdefgh12", "gh12345678"}, "abcdefgh12345678", "[redacted]345678"},
		{"the same key twice", []string{key, key}, key, "[redacted]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRedactor(tt.secrets...)
			if got := r.replace(tt.in); got != tt.want {
				t.Errorf("replace: %q, want %q", got, tt.want)
			}
			if ref := reference(tt.secrets, tt.in); ref != tt.want {
				t.Fatalf("the reference gives %q, want %q: fix the test", ref, tt.want)
			}
			// Split in two at every offset, and one byte at a time.
			for cut := range len(tt.in) + 1 {
				if got := redactInPieces(r, []byte(tt.in), []int{cut, len(tt.in)}); got != tt.want {
					t.Errorf("split at %d: %q, want %q", cut, got, tt.want)
				}
			}
			if got := redactInPieces(r, []byte(tt.in), []int{1}); got != tt.want {
				t.Errorf("byte by byte: %q, want %q", got, tt.want)
			}
		})
	}
}

// A write goes out at once but for a tail that may begin a secret, which
// waits for the next write or the end.
func TestRedactHoldsBackOnlyWhatMayBeASecret(t *testing.T) {
	const key = "sk-proj-abcdef123456"
	rec := httptest.NewRecorder()
	w, finish := newRedactor(key).wrap(rec)
	step := func(write, want string) {
		t.Helper()
		w.Write([]byte(write))
		w.(http.Flusher).Flush()
		if got := rec.Body.String(); got != want {
			t.Errorf("after writing %q: sent %q, want %q", write, got, want)
		}
	}
	step("data: {\"x\":1}\n\n", "data: {\"x\":1}\n\n")
	step("data: sk-proj-abc", "data: {\"x\":1}\n\ndata: ")
	step("def123456 and sk", "data: {\"x\":1}\n\ndata: [redacted] and ")
	step("y\n\n", "data: {\"x\":1}\n\ndata: [redacted] and sky\n\n")
	step("sk-proj", "data: {\"x\":1}\n\ndata: [redacted] and sky\n\n")
	finish()
	if got, want := rec.Body.String(), "data: {\"x\":1}\n\ndata: [redacted] and sky\n\nsk-proj"; got != want {
		t.Errorf("at the end: sent %q, want %q", got, want)
	}
}

func TestRedactHeaders(t *testing.T) {
	const key = "sk-proj-abcdef123456"
	rec := httptest.NewRecorder()
	w, finish := newRedactor(key).wrap(rec)
	h := w.Header()
	h.Set("Content-Length", "42")
	h.Set("X-Echo", "Bearer "+key)
	h["X-"+key] = []string{"v"} // as an upstream may send it, not canonicalized
	h.Set("Trailer", "X-Trailer")
	w.WriteHeader(http.StatusUnauthorized)
	h.Set("X-Trailer", key)
	finish()
	res := rec.Result()
	if got := res.Header.Get("X-Echo"); got != "Bearer [redacted]" {
		t.Errorf("X-Echo %q", got)
	}
	//lint:ignore SA1008 the header is looked up as it was set, not canonicalized
	if _, ok := res.Header["X-"+key]; ok {
		t.Error("a header named with the key was sent")
	}
	if got := res.Header.Get("Content-Length"); got != "" {
		t.Errorf("Content-Length %s kept: the body may change length", got)
	}
	if got := res.Trailer.Get("X-Trailer"); got != "[redacted]" {
		t.Errorf("trailer %q", got)
	}
}

func FuzzRedact(f *testing.F) {
	secrets := []string{"sk-secret-1234", "sk-secret-12345678", "12345678abcdefgh", "aaaaaaaa"}
	f.Add([]byte("x sk-secret-12345678abcdefgh y"), []byte{3, 1, 7})
	f.Add([]byte("aaaaaaaaaaaaaaaaa sk-secret-1234"), []byte{1})
	f.Add([]byte("sk-secret-123sk-secret-1234567"), []byte{5, 9})
	r := newRedactor(secrets...)
	f.Fuzz(func(t *testing.T, data, sizes []byte) {
		if len(sizes) == 0 {
			sizes = []byte{byte(len(data))}
		}
		n := make([]int, len(sizes))
		for i, s := range sizes {
			n[i] = int(s)
		}
		got := redactInPieces(r, data, n)
		if want := reference(secrets, string(data)); got != want {
			t.Fatalf("pieces %v: %q, want %q", n, got, want)
		}
		for _, s := range secrets {
			if strings.Contains(got, s) {
				t.Fatalf("%q holds %q", got, s)
			}
		}
	})
}

// discardWriter is a ResponseWriter that throws the body away.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) Flush()                      {}

// BenchmarkRedactStream streams the same response, one SSE event per
// flushed write as ReverseProxy sends them, straight to the connection's
// writer (the baseline) and through the redactor with a run's three
// secrets, in alternating rounds; it reports both rates, the cost per
// event and the ratio.
func BenchmarkRedactStream(b *testing.B) {
	var events [][]byte
	for i := range 500 {
		text := strings.Repeat("token ", i%7+1)
		events = append(events, []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"`+text+`"}}]}`+"\n\n"))
	}
	size := 0
	for _, e := range events {
		size += len(e)
	}
	r := newRedactor("sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH", "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123", "ghp_abcdefghijklmnopqrstuvwxyz012345")
	send := func(w http.ResponseWriter) {
		f := w.(http.Flusher)
		for _, e := range events {
			w.Write(e)
			f.Flush()
		}
	}
	var ours, base time.Duration
	for b.Loop() {
		start := time.Now()
		send(&discardWriter{h: http.Header{}})
		mid := time.Now()
		w, finish := r.wrap(&discardWriter{h: http.Header{}})
		send(w)
		finish()
		base, ours = base+mid.Sub(start), ours+time.Since(mid)
	}
	mb := float64(b.N*size) / 1e6
	n := float64(b.N * len(events))
	b.ReportMetric(mb/ours.Seconds(), "MB/s")
	b.ReportMetric(mb/base.Seconds(), "baseline-MB/s")
	b.ReportMetric(float64(ours-base)/n, "redact-ns/event")
	b.ReportMetric(ours.Seconds()/base.Seconds(), "x-baseline")
	b.ReportMetric(0, "ns/op")
}

func TestRedactStreamMatchesReference(t *testing.T) {
	// The benchmark's input is redacted like the reference, too.
	secrets := []string{"sk-proj-abcdefghijklmnopqrstuvwxyz"}
	in := bytes.Repeat([]byte("data: sk-proj-abcdefghijklmnopqrstuvwxyz sk-proj-abc\n\n"), 50)
	if got, want := redactInPieces(newRedactor(secrets...), in, []int{33, 7, 120}), reference(secrets, string(in)); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
