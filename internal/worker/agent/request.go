package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	openai "github.com/sashabaranov/go-openai"
)

// A chat API request resends the whole conversation every turn, so encoding
// it afresh each time costs time quadratic in the length of a session (a
// 100-turn session re-encoded about 5 MB of JSON). Instead each message is
// encoded once, when it joins the conversation, exactly as go-openai encodes
// it, and a request's body is assembled from those bytes. go-openai still
// makes the request, handles errors and reads the stream: it is given a
// request without messages, and bodyDoer, its HTTP client, sends the
// assembled body in its place.

// conversation is the messages of a chat so far, kept as their JSON.
type conversation struct {
	json []byte // the messages, comma-separated, without the brackets
}

// add appends m to the conversation.
func (c *conversation) add(m openai.ChatCompletionMessage) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s message: %w", m.Role, err)
	}
	if len(c.json) > 0 {
		c.json = append(c.json, ',')
	}
	c.json = append(c.json, b...)
	return nil
}

// start begins the conversation with the system prompt (if any) and the
// user's prompt.
func (c *conversation) start(system, prompt string) error {
	if system != "" {
		if err := c.add(openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: system}); err != nil {
			return err
		}
	}
	return c.add(openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: prompt})
}

// chatRequest is one streaming chat completions request.
type chatRequest struct {
	model          string
	conv           *conversation
	tools          []byte // the JSON array of tools, or nil
	responseFormat []byte // the JSON response_format, or nil
}

// body is the request's JSON: the fields go-openai would write for it,
// with streaming and the final usage chunk asked for.
func (r *chatRequest) body() []byte {
	b := make([]byte, 0, len(r.conv.json)+len(r.tools)+len(r.responseFormat)+128)
	b = append(b, `{"model":`...)
	model, _ := json.Marshal(r.model) // a string always encodes
	b = append(b, model...)
	b = append(b, `,"messages":[`...)
	b = append(b, r.conv.json...)
	b = append(b, ']')
	if r.tools != nil {
		b = append(b, `,"tools":`...)
		b = append(b, r.tools...)
	}
	if r.responseFormat != nil {
		b = append(b, `,"response_format":`...)
		b = append(b, r.responseFormat...)
	}
	return append(b, `,"stream":true,"stream_options":{"include_usage":true}}`...)
}

// encodeTools is the JSON array of tool definitions, encoded once per run.
func encodeTools(tools []openai.Tool) ([]byte, error) {
	if len(tools) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(tools)
	if err != nil {
		return nil, fmt.Errorf("encode tool definitions: %w", err)
	}
	return b, nil
}

type bodyKey struct{}

// withBody makes bodyDoer send body for the request made with ctx.
func withBody(ctx context.Context, body []byte) context.Context {
	return context.WithValue(ctx, bodyKey{}, body)
}

// bodyDoer is go-openai's HTTP client: it replaces the body of a request
// whose context carries one (see withBody), and adds header.
type bodyDoer struct {
	client *http.Client
	header http.Header
}

func (d bodyDoer) Do(req *http.Request) (*http.Response, error) {
	for k, v := range d.header {
		req.Header[k] = v
	}
	if body, ok := req.Context().Value(bodyKey{}).([]byte); ok {
		if req.Body != nil {
			req.Body.Close()
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		req.ContentLength = int64(len(body))
	}
	return d.client.Do(req)
}
