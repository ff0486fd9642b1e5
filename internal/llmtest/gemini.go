package llmtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// This file holds Google's Gemini API (v1beta), written from Google's
// published reference (ai.google.dev/api: "Generating content", "Models",
// "Counting tokens"), answering from the same script of turns as chat
// completions:
//
//   - POST /v1beta/models/MODEL:generateContent: one GenerateContentResponse;
//   - POST /v1beta/models/MODEL:streamGenerateContent: with ?alt=sse, a
//     server-sent event stream of GenerateContentResponse chunks (data
//     lines only, each event ending in CRLF CRLF as Google's servers end
//     them); without it, the chunks as one JSON array;
//   - POST /v1beta/models/MODEL:countTokens: {"totalTokens"}, no turn taken;
//   - GET /v1beta/models and /v1beta/models/MODEL: the one model, ModelID.
//
// Every request needs a key, in x-goog-api-key or ?key= (403
// PERMISSION_DENIED without one, as Google answers). Bodies are checked
// as Google checks them: unknown fields, no contents, a role other than
// user or model, or a content without parts are 400 INVALID_ARGUMENT.
// Errors are Google's {"error": {"code", "message", "status"}}.
//
// A turn's text streams in ChunkSize pieces, one text part a chunk; each
// tool call is a functionCall part of a chunk of its own (Gemini sends a
// call whole), with its ID only when the turn gives one (the Gemini API
// leaves it out). The last chunk carries finishReason (STOP, or
// MAX_TOKENS for a turn that finished for "length"). usageMetadata, from
// the turn's Usage, is in every chunk as the counts so far: the prompt's
// (and cached) tokens from the first, the candidates' in the last, as
// Gemini 2.5 models report them.

// GeminiRequest is a generateContent or streamGenerateContent request as
// the server decoded it.
type GeminiRequest struct {
	// Model and Method are the path's: models/MODEL:METHOD.
	Model, Method     string
	Contents          []GeminiContent   `json:"contents"`
	SystemInstruction *GeminiContent    `json:"systemInstruction,omitempty"`
	Tools             []json.RawMessage `json:"tools,omitempty"`
	ToolConfig        json.RawMessage   `json:"toolConfig,omitempty"`
	GenerationConfig  json.RawMessage   `json:"generationConfig,omitempty"`
	SafetySettings    json.RawMessage   `json:"safetySettings,omitempty"`
	CachedContent     string            `json:"cachedContent,omitempty"`
}

// GeminiContent is a Content: a role (user or model) and its parts.
type GeminiContent struct {
	Role  string       `json:"role,omitempty"`
	Parts []GeminiPart `json:"parts"`
}

// GeminiPart is a Part of a content; the fields the server models.
type GeminiPart struct {
	Text             string                  `json:"text,omitempty"`
	Thought          bool                    `json:"thought,omitempty"`
	FunctionCall     *GeminiFunctionCall     `json:"functionCall,omitempty"`
	FunctionResponse *GeminiFunctionResponse `json:"functionResponse,omitempty"`
}

// GeminiFunctionCall is a functionCall part's call.
type GeminiFunctionCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

// GeminiFunctionResponse is a functionResponse part's result.
type GeminiFunctionResponse struct {
	ID       string          `json:"id,omitempty"`
	Name     string          `json:"name"`
	Response json.RawMessage `json:"response"`
}

// Text is the text of the content's parts that are not thoughts.
func (c *GeminiContent) Text() string {
	var b strings.Builder
	for _, p := range c.Parts {
		if !p.Thought {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// geminiPrefix is where the Gemini API's paths start.
const geminiPrefix = "/v1beta/"

// geminiFields are the fields of a GenerateContentRequest, in the JSON
// names Google takes (proto JSON: lowerCamelCase or the proto's own
// snake_case), each with its lowerCamelCase name.
var geminiFields = map[string]string{
	"contents": "contents", "tools": "tools", "toolConfig": "toolConfig", "tool_config": "toolConfig",
	"safetySettings": "safetySettings", "safety_settings": "safetySettings",
	"systemInstruction": "systemInstruction", "system_instruction": "systemInstruction",
	"generationConfig": "generationConfig", "generation_config": "generationConfig",
	"cachedContent": "cachedContent", "cached_content": "cachedContent",
	"model": "model", "labels": "labels",
}

// decodeGeminiRequest decodes and checks a request body, with Google's
// error messages.
func decodeGeminiRequest(body []byte) (GeminiRequest, string) {
	var req GeminiRequest
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return req, "Invalid JSON payload received. " + err.Error()
	}
	camel := map[string]json.RawMessage{}
	for k, v := range raw {
		name, ok := geminiFields[k]
		if !ok {
			return req, fmt.Sprintf("Invalid JSON payload received. Unknown name %q: Cannot find field.", k)
		}
		camel[name] = v
	}
	b, _ := json.Marshal(camel)
	if err := json.Unmarshal(b, &req); err != nil {
		return req, "Invalid JSON payload received. " + err.Error()
	}
	if len(req.Contents) == 0 {
		return req, "* GenerateContentRequest.contents: contents is not specified\n"
	}
	for i, c := range req.Contents {
		if c.Role != "" && c.Role != "user" && c.Role != "model" {
			return req, "Please use a valid role: user, model."
		}
		if len(c.Parts) == 0 {
			return req, fmt.Sprintf("* GenerateContentRequest.contents[%d].parts: contents.parts must not be empty.\n", i)
		}
	}
	return req, ""
}

// geminiStatus is the canonical code Google names an HTTP status with.
func geminiStatus(code int) string {
	switch code {
	case 400:
		return "INVALID_ARGUMENT"
	case 401:
		return "UNAUTHENTICATED"
	case 403:
		return "PERMISSION_DENIED"
	case 404:
		return "NOT_FOUND"
	case 409:
		return "ABORTED"
	case 429:
		return "RESOURCE_EXHAUSTED"
	case 499:
		return "CANCELLED"
	case 500:
		return "INTERNAL"
	case 501:
		return "UNIMPLEMENTED"
	case 503:
		return "UNAVAILABLE"
	case 504:
		return "DEADLINE_EXCEEDED"
	}
	return "UNKNOWN"
}

func writeGeminiError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": status, "message": msg, "status": geminiStatus(status)}})
}

// geminiModel is the one model's Model resource.
var geminiModel = map[string]any{
	"name":                       "models/" + ModelID,
	"baseModelId":                ModelID,
	"version":                    "001",
	"displayName":                "llmtest",
	"description":                "llmtest's scripted model",
	"inputTokenLimit":            1048576,
	"outputTokenLimit":           65536,
	"supportedGenerationMethods": []string{"generateContent", "countTokens"},
	"temperature":                1,
	"maxTemperature":             2,
	"topP":                       0.95,
	"topK":                       64,
	"thinking":                   true,
}

// gemini serves the Gemini API's paths.
func (s *Server) gemini(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Goog-Api-Key") == "" && r.URL.Query().Get("key") == "" {
		s.recordError("llmtest: %s %s without an API key", r.Method, r.URL.Path)
		writeGeminiError(w, http.StatusForbidden, "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.")
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, geminiPrefix+"models")
	switch {
	case !ok:
		s.notFound(w, r)
		return
	case name == "" || name == "/":
		if r.Method != http.MethodGet {
			s.notFound(w, r)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"models": []any{geminiModel}})
		return
	}
	model, method, hasMethod := strings.Cut(strings.TrimPrefix(name, "/"), ":")
	switch {
	case !hasMethod && r.Method == http.MethodGet:
		if model != ModelID {
			s.recordError("llmtest: GET %s: unknown model", r.URL.Path)
			writeGeminiError(w, http.StatusNotFound, fmt.Sprintf("models/%s is not found for API version v1beta, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods.", model))
			return
		}
		writeJSON(w, http.StatusOK, geminiModel)
		return
	case r.Method != http.MethodPost || model == "" || strings.Contains(model, "/"):
		s.notFound(w, r)
		return
	}
	switch method {
	case "generateContent", "streamGenerateContent":
		s.generateContent(w, r, model, method)
	case "countTokens":
		s.countTokens(w, r)
	default:
		s.notFound(w, r)
	}
}

// countTokens answers with a count of the request's characters, four to
// a token, as estimates go.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || !json.Valid(body) {
		s.recordError("llmtest: countTokens: a body that is not JSON")
		writeGeminiError(w, http.StatusBadRequest, "Invalid JSON payload received.")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"totalTokens": max(1, len(body)/4)})
}

func (s *Server) generateContent(w http.ResponseWriter, r *http.Request, model, method string) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.recordError("llmtest: reading request body: %v", err)
		writeGeminiError(w, http.StatusBadRequest, "llmtest: reading request body: "+err.Error())
		return
	}
	greq, bad := decodeGeminiRequest(body)
	greq.Model, greq.Method = model, method
	req := Request{Header: r.Header.Clone(), Path: r.URL.Path, Body: body, Gemini: greq}
	turn, i, status, msg := s.take(req, bad)
	if status != 0 {
		writeGeminiError(w, status, msg)
		return
	}
	sse := r.URL.Query().Get("alt") == "sse"
	switch {
	case turn.Status != 0:
		msg := turn.Error
		if msg == "" {
			msg = http.StatusText(turn.Status)
		}
		writeGeminiError(w, turn.Status, msg)
	case turn.RawSSE != "":
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, turn.RawSSE)
		_ = http.NewResponseController(w).Flush()
	case method == "generateContent":
		writeJSON(w, http.StatusOK, s.geminiResponse(i, model, &turn))
	case sse:
		s.streamGemini(w, s.geminiChunks(i, model, &turn))
	default:
		// Without alt=sse, the chunks come as one JSON array.
		var b bytes.Buffer
		b.WriteByte('[')
		for k, c := range s.geminiChunks(i, model, &turn) {
			if k > 0 {
				b.WriteString(",\r\n")
			}
			b.Write(marshal(c))
		}
		b.WriteByte(']')
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b.Bytes())
	}
}

// geminiFinish is a turn's finish reason in Gemini's terms.
func geminiFinish(t *Turn) string {
	switch finishReason(t) {
	case "length":
		return "MAX_TOKENS"
	case "content_filter":
		return "SAFETY"
	}
	return "STOP" // a turn with function calls too
}

func responseID(i int) string { return fmt.Sprintf("llmtest-gemini-%06d", i) }

// geminiUsage is a turn's usageMetadata; all reports the candidates'
// tokens, which the chunks before the last leave out. nil without usage.
func geminiUsage(u *Usage, all bool) map[string]int {
	if u == nil {
		return nil
	}
	m := map[string]int{"promptTokenCount": u.PromptTokens, "totalTokenCount": u.PromptTokens}
	if u.CachedTokens > 0 {
		m["cachedContentTokenCount"] = u.CachedTokens
	}
	if all {
		m["candidatesTokenCount"] = u.CompletionTokens
		m["totalTokenCount"] = u.PromptTokens + u.CompletionTokens
	}
	return m
}

// geminiParts are a turn's parts: its text, then its function calls.
func geminiParts(t *Turn) []GeminiPart {
	var parts []GeminiPart
	if t.Text != "" {
		parts = append(parts, GeminiPart{Text: t.Text})
	}
	for _, tc := range t.ToolCalls {
		parts = append(parts, GeminiPart{FunctionCall: &GeminiFunctionCall{ID: tc.ID, Name: tc.Name, Args: toolInput(tc.Arguments)}})
	}
	if len(parts) == 0 {
		parts = []GeminiPart{{Text: ""}}
	}
	return parts
}

// geminiChunk is one GenerateContentResponse.
func geminiChunk(i int, model string, parts []GeminiPart, finish string, usage map[string]int) map[string]any {
	cand := map[string]any{"content": map[string]any{"parts": parts, "role": "model"}, "index": 0}
	if finish != "" {
		cand["finishReason"] = finish
	}
	c := map[string]any{"candidates": []any{cand}, "modelVersion": model, "responseId": responseID(i)}
	if usage != nil {
		c["usageMetadata"] = usage
	}
	return c
}

func (s *Server) geminiResponse(i int, model string, t *Turn) map[string]any {
	return geminiChunk(i, model, geminiParts(t), geminiFinish(t), geminiUsage(t.Usage, true))
}

// geminiChunks are the chunks of a streamed turn: its text in pieces,
// each function call whole, the finish reason and the whole usage with
// the last.
func (s *Server) geminiChunks(i int, model string, t *Turn) []map[string]any {
	var parts [][]GeminiPart
	for _, piece := range splitChunks(t.Text, s.chunkSize) {
		parts = append(parts, []GeminiPart{{Text: piece}})
	}
	for _, tc := range t.ToolCalls {
		parts = append(parts, []GeminiPart{{FunctionCall: &GeminiFunctionCall{ID: tc.ID, Name: tc.Name, Args: toolInput(tc.Arguments)}}})
	}
	if len(parts) == 0 {
		parts = [][]GeminiPart{{{Text: ""}}}
	}
	chunks := make([]map[string]any, len(parts))
	for k, p := range parts {
		last := k == len(parts)-1
		finish := ""
		if last {
			finish = geminiFinish(t)
		}
		chunks[k] = geminiChunk(i, model, p, finish, geminiUsage(t.Usage, last))
	}
	return chunks
}

// streamGemini writes chunks as Google's server-sent events: data lines
// only, CRLF-terminated.
func (s *Server) streamGemini(w http.ResponseWriter, chunks []map[string]any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for _, c := range chunks {
		if _, err := fmt.Fprintf(w, "data: %s\r\n\r\n", marshal(c)); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
}
