package llmtest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// doGemini sends a Gemini API request as Google's SDK does (the key in
// x-goog-api-key unless key is "") and returns the status, content type
// and body.
func doGemini(t *testing.T, method, url, key, body string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("X-Goog-Api-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// geminiChunk is the part of a GenerateContentResponse the tests read.
type geminiChunk struct {
	Candidates []struct {
		Content      llmtest.GeminiContent
		FinishReason string
	}
	UsageMetadata *struct {
		PromptTokenCount, CandidatesTokenCount, CachedContentTokenCount, TotalTokenCount *int
	}
	ModelVersion, ResponseID string
}

const geminiHello = `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"systemInstruction":{"parts":[{"text":"be brief"}]},
	"tools":[{"functionDeclarations":[{"name":"read","parametersJsonSchema":{"type":"object"}}]}]}`

func TestGemini(t *testing.T) {
	usage := &llmtest.Usage{PromptTokens: 30, CompletionTokens: 5, CachedTokens: 10}
	srv := llmtest.NewWithOptions(t, llmtest.Options{API: llmtest.OnlyGemini, ChunkSize: 4},
		llmtest.Turn{Text: "Hello there", Usage: usage},
		llmtest.Turn{Text: "Hi", ToolCalls: []llmtest.ToolCall{{Name: "read", Arguments: `{"path":"a"}`}}, Usage: usage},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "read", Arguments: `{"path":"b"}`}}, Usage: usage},
	)
	base := srv.URL() + "/v1beta/models/gemini-test:"

	status, ct, got := doGemini(t, "POST", base+"generateContent", "AIza-test", geminiHello)
	var c geminiChunk
	if err := json.Unmarshal([]byte(got), &c); err != nil || status != 200 || ct != "application/json" {
		t.Fatalf("%d %s %s", status, ct, got)
	}
	if len(c.Candidates) != 1 || c.Candidates[0].Content.Text() != "Hello there" || c.Candidates[0].Content.Role != "model" ||
		c.Candidates[0].FinishReason != "STOP" || c.ModelVersion != "gemini-test" || c.UsageMetadata == nil ||
		*c.UsageMetadata.PromptTokenCount != 30 || *c.UsageMetadata.CandidatesTokenCount != 5 ||
		*c.UsageMetadata.CachedContentTokenCount != 10 || *c.UsageMetadata.TotalTokenCount != 35 {
		t.Errorf("response %s", got)
	}

	// A stream: data lines ending in CRLF CRLF, the counts so far in every
	// chunk, the call whole in a chunk of its own, without an id.
	status, ct, got = doGemini(t, "POST", base+"streamGenerateContent?alt=sse", "AIza-test", geminiHello)
	if status != 200 || ct != "text/event-stream" || !strings.HasSuffix(got, "}\r\n\r\n") {
		t.Fatalf("stream %d %s %q", status, ct, got)
	}
	var chunks []geminiChunk
	for ev := range strings.SplitSeq(strings.TrimSuffix(got, "\r\n\r\n"), "\r\n\r\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		var c geminiChunk
		if !ok || json.Unmarshal([]byte(data), &c) != nil {
			t.Fatalf("event %q", ev)
		}
		chunks = append(chunks, c)
	}
	if len(chunks) != 2 {
		t.Fatalf("%d chunks, want the text and the call:\n%s", len(chunks), got)
	}
	if p := chunks[0].Candidates[0].Content.Parts; len(p) != 1 || p[0].Text != "Hi" || chunks[0].Candidates[0].FinishReason != "" ||
		*chunks[0].UsageMetadata.PromptTokenCount != 30 || chunks[0].UsageMetadata.CandidatesTokenCount != nil {
		t.Errorf("first chunk %+v", chunks[0])
	}
	last := chunks[1]
	if p := last.Candidates[0].Content.Parts; len(p) != 1 || p[0].FunctionCall == nil || p[0].FunctionCall.Name != "read" ||
		p[0].FunctionCall.ID != "" || string(p[0].FunctionCall.Args) != `{"path":"a"}` || last.Candidates[0].FinishReason != "STOP" ||
		*last.UsageMetadata.CandidatesTokenCount != 5 || *last.UsageMetadata.TotalTokenCount != 35 {
		t.Errorf("last chunk %s", got)
	}

	// Without alt=sse, the chunks come as one JSON array.
	status, ct, got = doGemini(t, "POST", base+"streamGenerateContent", "AIza-test", geminiHello)
	var arr []geminiChunk
	if err := json.Unmarshal([]byte(got), &arr); err != nil || status != 200 || ct != "application/json" || len(arr) != 1 ||
		arr[0].Candidates[0].Content.Parts[0].FunctionCall.ID != "c1" {
		t.Errorf("array %d %s: %s", status, ct, got)
	}

	reqs := srv.Requests()
	if len(reqs) != 3 || reqs[0].Gemini.Model != "gemini-test" || reqs[0].Gemini.Method != "generateContent" ||
		reqs[1].Gemini.Method != "streamGenerateContent" || len(reqs[0].Gemini.Contents) != 1 ||
		reqs[0].Gemini.Contents[0].Text() != "hi" || reqs[0].Gemini.SystemInstruction.Text() != "be brief" ||
		len(reqs[0].Gemini.Tools) != 1 || reqs[0].Header.Get("X-Goog-Api-Key") != "AIza-test" {
		t.Errorf("requests %+v", reqs)
	}
	if errs := srv.Errors(); len(errs) > 0 {
		t.Errorf("errors %v", errs)
	}
}

// The models, the token count, and what Google refuses, in Google's
// error shape.
func TestGeminiRoutesAndRefusals(t *testing.T) {
	srv := llmtest.New(t, llmtest.Turn{Text: "ok"}, llmtest.Turn{Status: 429, Error: "Resource has been exhausted"})
	root := srv.URL() + "/v1beta/models"
	status, _, got := doGemini(t, "GET", root, "AIza-test", "")
	if status != 200 || !strings.Contains(got, `"name":"models/`+llmtest.ModelID+`"`) || !strings.Contains(got, `"supportedGenerationMethods":["generateContent","countTokens"]`) {
		t.Errorf("models %d %s", status, got)
	}
	if status, _, got = doGemini(t, "GET", root+"/"+llmtest.ModelID, "AIza-test", ""); status != 200 || !strings.Contains(got, `"displayName":"llmtest"`) {
		t.Errorf("model %d %s", status, got)
	}
	if status, _, got = doGemini(t, "POST", root+"/m:countTokens", "AIza-test", geminiHello); status != 200 || !strings.Contains(got, `"totalTokens":`) {
		t.Errorf("countTokens %d %s", status, got)
	}
	// The key may come as ?key=, as in Google's curl examples.
	if status, _, got = doGemini(t, "POST", root+"/m:generateContent?key=AIza-test", "", geminiHello); status != 200 || !strings.Contains(got, `"text":"ok"`) {
		t.Errorf("?key= %d %s", status, got)
	}
	for _, tc := range []struct {
		name, method, url, key, body string
		status                       int
		want                         string
	}{
		{"no key", "POST", root + "/m:generateContent", "", geminiHello, 403, `"status":"PERMISSION_DENIED"`},
		{"unknown field", "POST", root + "/m:generateContent", "k", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"messages":[]}`, 400,
			`Unknown name \"messages\": Cannot find field.`},
		{"no contents", "POST", root + "/m:generateContent", "k", `{}`, 400, `contents is not specified`},
		{"a bad role", "POST", root + "/m:generateContent", "k", `{"contents":[{"role":"assistant","parts":[{"text":"hi"}]}]}`, 400, `Please use a valid role: user, model.`},
		{"no parts", "POST", root + "/m:streamGenerateContent?alt=sse", "k", `{"contents":[{"role":"user","parts":[]}]}`, 400, `contents[0].parts: contents.parts must not be empty.`},
		{"not JSON", "POST", root + "/m:generateContent", "k", `{`, 400, `"status":"INVALID_ARGUMENT"`},
		{"an unknown model", "GET", root + "/nope", "k", "", 404, `models/nope is not found for API version v1beta`},
		{"an unknown method", "POST", root + "/m:embedContent", "k", geminiHello, 404, `"status":"NOT_FOUND"`},
		{"a scripted error", "POST", root + "/m:generateContent", "k", geminiHello, 429, `{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED"}}`},
	} {
		status, ct, got := doGemini(t, tc.method, tc.url, tc.key, tc.body)
		if status != tc.status || ct != "application/json" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %d %s %s, want %d and %s", tc.name, status, ct, got, tc.status, tc.want)
		}
	}
	// Each API serves only its own paths when asked to.
	only := llmtest.NewWithOptions(t, llmtest.Options{API: llmtest.OnlyOpenAI}, llmtest.Turn{Text: "x"})
	if status, _, got := doGemini(t, "POST", only.URL()+"/v1beta/models/m:generateContent", "k", geminiHello); status != 404 || !strings.Contains(got, `"status":"NOT_FOUND"`) {
		t.Errorf("an OpenAI-only server: %d %s", status, got)
	}
	g := llmtest.NewWithOptions(t, llmtest.Options{API: llmtest.OnlyGemini}, llmtest.Turn{Text: "x"})
	if status, _, got := doGemini(t, "POST", g.URL()+"/v1/chat/completions", "k", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`); status != 404 || !strings.Contains(got, `"status":"NOT_FOUND"`) {
		t.Errorf("a Gemini-only server: %d %s", status, got)
	}
}
