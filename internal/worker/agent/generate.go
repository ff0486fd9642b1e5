package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	openai "github.com/sashabaranov/go-openai"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// Schema is a JSON Schema the answer of a generate call must match.
type Schema struct {
	name     string          // for response_format, ^[A-Za-z0-9_-]{1,64}$
	raw      json.RawMessage // sent to the model
	resolved *jsonschema.Resolved
}

// CompileSchema reads a JSON Schema document; name (a file name) names it
// for the model.
func CompileSchema(name string, data []byte) (*Schema, error) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		return nil, fmt.Errorf("schema %s is not JSON: %w", name, err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("schema %s is not a valid JSON Schema: %s", name, oneLine(err))
	}
	// No loader: a schema cannot make the worker fetch or read anything.
	resolved, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("schema %s is not a valid JSON Schema: %s", name, oneLine(err))
	}
	return &Schema{name: schemaName(name), raw: compact.Bytes(), resolved: resolved}, nil
}

var unsafeNameChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// schemaName derives the response_format name OpenAI requires from a file
// name: "review-output.json" becomes "review-output".
func schemaName(file string) string {
	n := unsafeNameChars.ReplaceAllString(strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)), "_")
	n = strings.Trim(n, "_")
	if n == "" {
		n = "answer"
	}
	return n[:min(len(n), 64)]
}

// validate checks the answer text against the schema and returns it compact.
func (s *Schema) validate(answer string) ([]byte, error) {
	var doc any
	if err := json.Unmarshal([]byte(answer), &doc); err != nil {
		return nil, fmt.Errorf("the answer is not a JSON document: %v", err)
	}
	if err := s.resolved.Validate(doc); err != nil {
		return nil, fmt.Errorf("the answer does not match the schema: %s", oneLine(err))
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(answer)); err != nil {
		return nil, fmt.Errorf("the answer is not a JSON document: %v", err)
	}
	return compact.Bytes(), nil
}

// Generate makes one call for one answer: free text, or with a Schema a JSON
// document that matches it.
type Generate struct {
	LLM    *LLM
	Model  string
	System string  // the system prompt; may be empty
	Schema *Schema // nil: free text
	Out    *protocol.Encoder
	Logger *slog.Logger
}

// Run asks for the answer to prompt and writes it as the result line, then
// the usage. With a Schema, the model is asked for strict JSON schema output
// and the answer is validated; if it does not match, the model gets the
// validation error and one more try.
func (g *Generate) Run(ctx context.Context, prompt string) error {
	usage := newTally(g.Model)
	answer, err := g.generate(ctx, prompt, usage)
	return finish(g.Out, g.Model, answer, err, usage)
}

func (g *Generate) generate(ctx context.Context, prompt string, usage *tally) (string, error) {
	req := &chatRequest{model: g.Model, conv: &conversation{}}
	if err := req.conv.start(g.System, prompt); err != nil {
		return "", err
	}
	if g.Schema != nil {
		rf, err := json.Marshal(openai.ChatCompletionResponseFormat{
			Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{
				Name: g.Schema.name, Schema: g.Schema.raw, Strict: true,
			},
		})
		if err != nil {
			return "", fmt.Errorf("encode response_format: %w", err)
		}
		req.responseFormat = rf
	}
	const attempts = 2
	var invalid error
	for attempt := 1; attempt <= attempts; attempt++ {
		r, err := g.LLM.complete(ctx, req)
		if err != nil {
			return "", err
		}
		usage.add(r.Usage)
		if g.Schema == nil {
			return r.Text, nil
		}
		doc, err := g.Schema.validate(r.Text)
		if err == nil {
			return string(doc), nil
		}
		invalid = err
		g.Logger.Info("answer does not match the schema", "attempt", attempt, "err", err)
		req.conv.add(openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: r.Text})
		req.conv.add(openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: fmt.Sprintf(
			"That answer is not valid: %v. Reply again with only a JSON document that matches the schema.", err)})
	}
	return "", fmt.Errorf("no valid answer after %d attempts: %w", attempts, invalid)
}

// oneLine flattens a multi-line error (jsonschema's are) into one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}
