package llmwire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// DefaultMaxTokens is the max_tokens of a request translated to Anthropic's
// API that sets neither max_tokens nor max_completion_tokens: Anthropic
// requires one, OpenAI does not. 4096 is what every Claude model can give.
const DefaultMaxTokens = 4096

// RequestOptions shape a translated request.
type RequestOptions struct {
	// Model, when not "", replaces the model the client asked for: an
	// Anthropic client asks for a Claude model, which an OpenAI upstream
	// does not know.
	Model string
	// MaxCompletionTokens sends Anthropic's max_tokens to OpenAI as
	// max_completion_tokens, which OpenAI's own API wants for its reasoning
	// models, rather than max_tokens, which every compatible server knows.
	MaxCompletionTokens bool
}

// RequestInfo is what the translation of a request learnt that the
// translation of its response needs.
type RequestInfo struct {
	From         API    // the client's API
	Stream       bool   // the client asked for a stream
	IncludeUsage bool   // an OpenAI client asked for the usage chunk (stream_options.include_usage)
	Model        string // the model the client asked for
}

// RequestError is a request that cannot be translated; Status is the HTTP
// status to answer with.
type RequestError struct {
	Status  int
	Message string
}

func (e *RequestError) Error() string { return e.Message }

func badRequest(format string, args ...any) *RequestError {
	return &RequestError{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...)}
}

// TranslateRequest translates a request body of from's API (a chat
// completions request for OpenAI, a messages request for Anthropic) into
// the other API's. What one API has and the other lacks is dropped or
// approximated, as docs/proxy.md lists. A request that cannot be
// translated is a *RequestError.
func TranslateRequest(from API, body []byte, opts RequestOptions) ([]byte, RequestInfo, error) {
	switch from {
	case Anthropic:
		return anthropicToOpenAI(body, opts)
	case OpenAI:
		return openAIToAnthropic(body, opts)
	}
	return nil, RequestInfo{}, fmt.Errorf("unknown API %q", from)
}

// marshal encodes v without HTML escaping, as both APIs do.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func anthropicToOpenAI(body []byte, opts RequestOptions) ([]byte, RequestInfo, error) {
	var in MessagesRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, RequestInfo{}, badRequest("the body is not a messages request: %v", err)
	}
	info := RequestInfo{From: Anthropic, Stream: in.Stream, Model: in.Model}
	out := ChatRequest{Model: in.Model, Stream: in.Stream, Temperature: in.Temperature, TopP: in.TopP}
	if opts.Model != "" {
		out.Model = opts.Model
	}
	if in.Stream {
		out.StreamOptions = &StreamOptions{IncludeUsage: true}
	}
	if in.MaxTokens > 0 {
		n := in.MaxTokens
		if opts.MaxCompletionTokens {
			out.MaxCompletionTokens = &n
		} else {
			out.MaxTokens = &n
		}
	}
	if len(in.StopSequences) > 0 {
		out.Stop, _ = json.Marshal(in.StopSequences)
	}
	if in.Metadata != nil {
		out.User = in.Metadata.UserID
	}
	if sys := systemText(in.System); sys != "" {
		out.Messages = append(out.Messages, ChatMessage{Role: "system", Content: jsonString(sys)})
	}
	for i, m := range in.Messages {
		bs, err := m.Blocks()
		if err != nil {
			return nil, info, badRequest("messages[%d].content: %v", i, err)
		}
		switch m.Role {
		case "assistant":
			out.Messages = append(out.Messages, assistantToOpenAI(bs))
		case "user":
			out.Messages = append(out.Messages, userToOpenAI(bs)...)
		default:
			return nil, info, badRequest("messages[%d].role %q: want user or assistant", i, m.Role)
		}
	}
	for _, t := range in.Tools {
		if len(t.InputSchema) == 0 {
			continue // a server tool (web search...), which only Anthropic runs
		}
		out.Tools = append(out.Tools, ChatTool{Type: "function", Function: ChatFunction{Name: t.Name, Description: t.Description, Parameters: t.InputSchema}})
	}
	if tc := in.ToolChoice; tc != nil && len(out.Tools) > 0 {
		switch tc.Type {
		case "auto", "":
			out.ToolChoice = jsonString("auto")
		case "any":
			out.ToolChoice = jsonString("required")
		case "none":
			out.ToolChoice = jsonString("none")
		case "tool":
			out.ToolChoice, _ = json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}})
		default:
			return nil, info, badRequest("tool_choice.type %q: want auto, any, tool or none", tc.Type)
		}
		if tc.DisableParallelToolUse != nil && *tc.DisableParallelToolUse {
			f := false
			out.ParallelToolCalls = &f
		}
	}
	b, err := marshal(out)
	return b, info, err
}

func jsonString(s string) json.RawMessage {
	b, _ := marshal(s)
	return b
}

// systemText is a system prompt, a string or text blocks, as one text.
func systemText(raw json.RawMessage) string {
	bs, _ := blocks(raw)
	var parts []string
	for _, b := range bs {
		if b.Type == "text" && b.Text != "" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n\n")
}

// omitted is the text that stands for a block OpenAI's API cannot carry.
func omitted(typ string) string {
	return fmt.Sprintf("[a %s block was omitted: the model's API cannot take it]", typ)
}

func assistantToOpenAI(bs []ContentBlock) ChatMessage {
	msg := ChatMessage{Role: "assistant"}
	var text strings.Builder
	for _, b := range bs {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			args := string(compact(b.Input))
			if args == "" {
				args = "{}"
			}
			msg.ToolCalls = append(msg.ToolCalls, ChatToolCall{ID: b.ID, Type: "function", Function: ChatFunctionCall{Name: b.Name, Arguments: args}})
		case "thinking", "redacted_thinking":
			// The model's own reasoning: only Anthropic can check its signature.
		default:
			text.WriteString(omitted(b.Type))
		}
	}
	if text.Len() > 0 || len(msg.ToolCalls) == 0 {
		msg.Content = jsonString(text.String())
	} else {
		msg.Content = json.RawMessage("null")
	}
	return msg
}

// userToOpenAI turns a user message into the tool messages of its
// tool_result blocks, first, as OpenAI wants them right after the
// assistant's tool calls, then a user message of the rest, if any.
func userToOpenAI(bs []ContentBlock) []ChatMessage {
	var out []ChatMessage
	var parts []ChatContentPart
	for _, b := range bs {
		switch b.Type {
		case "tool_result":
			out = append(out, ChatMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: jsonString(toolResultText(b))})
		case "text":
			parts = append(parts, ChatContentPart{Type: "text", Text: b.Text})
		case "image":
			if u := imageURL(b.Source); u != "" {
				parts = append(parts, ChatContentPart{Type: "image_url", ImageURL: &ChatImageURL{URL: u}})
			} else {
				parts = append(parts, ChatContentPart{Type: "text", Text: omitted("image")})
			}
		default:
			parts = append(parts, ChatContentPart{Type: "text", Text: omitted(b.Type)})
		}
	}
	switch {
	case len(parts) == 1 && parts[0].Type == "text":
		out = append(out, ChatMessage{Role: "user", Content: jsonString(parts[0].Text)})
	case len(parts) > 0:
		c, _ := marshal(parts)
		out = append(out, ChatMessage{Role: "user", Content: c})
	}
	return out
}

// toolResultText is a tool_result's content as text, marked when it was
// an error (OpenAI's tool messages have no flag for it).
func toolResultText(b ContentBlock) string {
	bs, _ := blocks(b.Content)
	var parts []string
	for _, c := range bs {
		if c.Type == "text" {
			parts = append(parts, c.Text)
		} else {
			parts = append(parts, omitted(c.Type))
		}
	}
	s := strings.Join(parts, "\n")
	if b.IsError {
		s = "Error: " + s
	}
	return s
}

func imageURL(s *ImageSource) string {
	switch {
	case s == nil:
		return ""
	case s.Type == "base64" && s.MediaType != "":
		return "data:" + s.MediaType + ";base64," + s.Data
	case s.Type == "url":
		return s.URL
	}
	return ""
}

func openAIToAnthropic(body []byte, opts RequestOptions) ([]byte, RequestInfo, error) {
	var in ChatRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, RequestInfo{}, badRequest("the body is not a chat completions request: %v", err)
	}
	info := RequestInfo{From: OpenAI, Stream: in.Stream, Model: in.Model, IncludeUsage: in.StreamOptions != nil && in.StreamOptions.IncludeUsage}
	if in.N != nil && *in.N > 1 {
		return nil, info, badRequest("n=%d: the model's API (Anthropic's) gives one choice per request; send n=1 or leave n out", *in.N)
	}
	out := MessagesRequest{Model: in.Model, Stream: in.Stream, TopP: in.TopP, MaxTokens: DefaultMaxTokens}
	if opts.Model != "" {
		out.Model = opts.Model
	}
	switch {
	case in.MaxCompletionTokens != nil && *in.MaxCompletionTokens > 0:
		out.MaxTokens = *in.MaxCompletionTokens
	case in.MaxTokens != nil && *in.MaxTokens > 0:
		out.MaxTokens = *in.MaxTokens
	}
	if t := in.Temperature; t != nil {
		v := min(max(*t, 0), 1) // OpenAI's range is 0 to 2, Anthropic's 0 to 1
		out.Temperature = &v
	}
	if len(in.Stop) > 0 && string(in.Stop) != "null" {
		var one string
		if json.Unmarshal(in.Stop, &one) == nil {
			out.StopSequences = []string{one}
		} else if err := json.Unmarshal(in.Stop, &out.StopSequences); err != nil {
			return nil, info, badRequest("stop: want a string or an array of strings")
		}
	}
	if in.User != "" {
		out.Metadata = &MessagesMetadata{UserID: in.User}
	}
	var system []string
	var msgs []Message
	var cur []ContentBlock
	curRole := ""
	flush := func() {
		if len(cur) > 0 {
			c, _ := marshal(cur)
			msgs = append(msgs, Message{Role: curRole, Content: c})
		}
		cur = nil
	}
	// add appends blocks to a message of role: consecutive messages of one
	// role (tool results and the user's text after them) become one.
	add := func(role string, bs ...ContentBlock) {
		if role != curRole {
			flush()
			curRole = role
		}
		cur = append(cur, bs...)
	}
	for i, m := range in.Messages {
		parts, err := m.Parts()
		if err != nil {
			return nil, info, badRequest("messages[%d].content: %v", i, err)
		}
		switch m.Role {
		case "system", "developer":
			if s := m.Text(); s != "" {
				system = append(system, s)
			}
		case "user":
			add("user", partsToBlocks(parts)...)
		case "assistant":
			bs := partsToBlocks(parts)
			for _, tc := range m.ToolCalls {
				bs = append(bs, ContentBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: ToolInput(tc.Function.Arguments)})
			}
			add("assistant", bs...)
		case "tool":
			add("user", ContentBlock{Type: "tool_result", ToolUseID: m.ToolCallID, Content: jsonString(m.Text())})
		default:
			return nil, info, badRequest("messages[%d].role %q: want system, developer, user, assistant or tool", i, m.Role)
		}
	}
	flush()
	out.Messages = msgs
	if len(system) > 0 {
		out.System = jsonString(strings.Join(system, "\n\n"))
	}
	for _, t := range in.Tools {
		if t.Type != "function" {
			continue
		}
		schema := t.Function.Parameters
		if len(bytes.TrimSpace(schema)) == 0 || string(schema) == "null" {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out.Tools = append(out.Tools, MessagesTool{Name: t.Function.Name, Description: t.Function.Description, InputSchema: schema})
	}
	if len(out.Tools) > 0 {
		var choice *MessagesToolChoice
		if tc := bytes.TrimSpace(in.ToolChoice); len(tc) > 0 && string(tc) != "null" {
			var s string
			var named struct {
				Function struct{ Name string } `json:"function"`
			}
			switch {
			case json.Unmarshal(tc, &s) == nil:
				switch s {
				case "auto":
					choice = &MessagesToolChoice{Type: "auto"}
				case "required":
					choice = &MessagesToolChoice{Type: "any"}
				case "none":
					choice = &MessagesToolChoice{Type: "none"}
				default:
					return nil, info, badRequest("tool_choice %q: want none, auto, required or a function", s)
				}
			case json.Unmarshal(tc, &named) == nil && named.Function.Name != "":
				choice = &MessagesToolChoice{Type: "tool", Name: named.Function.Name}
			default:
				return nil, info, badRequest("tool_choice: want none, auto, required or {\"type\":\"function\",\"function\":{\"name\":...}}")
			}
		}
		if p := in.ParallelToolCalls; p != nil && !*p {
			if choice == nil {
				choice = &MessagesToolChoice{Type: "auto"}
			}
			if choice.Type != "none" {
				t := true
				choice.DisableParallelToolUse = &t
			}
		}
		out.ToolChoice = choice
	}
	b, err := marshal(out)
	return b, info, err
}

// partsToBlocks turns OpenAI content parts into Anthropic blocks; empty
// text, which Anthropic refuses, is left out.
func partsToBlocks(parts []ChatContentPart) []ContentBlock {
	var bs []ContentBlock
	for _, p := range parts {
		switch p.Type {
		case "text":
			if p.Text != "" {
				bs = append(bs, ContentBlock{Type: "text", Text: p.Text})
			}
		case "image_url":
			if p.ImageURL != nil {
				bs = append(bs, ContentBlock{Type: "image", Source: imageSource(p.ImageURL.URL)})
			}
		default:
			bs = append(bs, ContentBlock{Type: "text", Text: omitted(p.Type)})
		}
	}
	return bs
}

// imageSource is an image URL as Anthropic's source: a data: URL as
// base64 data, anything else as a URL.
func imageSource(u string) *ImageSource {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		if meta, data, ok := strings.Cut(rest, ","); ok {
			if mt, ok := strings.CutSuffix(meta, ";base64"); ok {
				return &ImageSource{Type: "base64", MediaType: mt, Data: data}
			}
		}
	}
	return &ImageSource{Type: "url", URL: u}
}

// ToolInput is the arguments of an OpenAI tool call as the input of an
// Anthropic tool_use block, which must be a JSON object: "" is {}, and
// arguments that are not a JSON object (the model may send invalid JSON)
// are kept, as text, in {"_raw": "..."}.
func ToolInput(args string) json.RawMessage {
	a := strings.TrimSpace(args)
	if a == "" {
		return json.RawMessage("{}")
	}
	if strings.HasPrefix(a, "{") && json.Valid([]byte(a)) {
		return compact(json.RawMessage(a))
	}
	b, _ := marshal(map[string]string{"_raw": args})
	return b
}
