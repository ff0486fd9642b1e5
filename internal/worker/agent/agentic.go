// Package agent is the worker's conversation with the model: the agentic
// loop (the model calls tools until it gives a final answer) and the single
// structured generate call. Everything it does is written as protocol lines;
// the last two are always a result and the run's usage.
package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	openai "github.com/sashabaranov/go-openai"

	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/internal/worker/tools"
)

// DefaultMaxTurns is how many LLM calls an agentic run may make.
const DefaultMaxTurns = 100

// Toolbox is what the agent can call: [tools.Set] in the worker.
type Toolbox interface {
	Definitions() []tools.Definition
	Call(ctx context.Context, name string, args json.RawMessage) tools.Result
}

// Agentic runs the agent loop.
type Agentic struct {
	LLM      *LLM
	Tools    Toolbox
	Model    string
	System   string // the system prompt
	MaxTurns int    // 0: DefaultMaxTurns
	Out      *protocol.Encoder
	Logger   *slog.Logger
}

// Run works on prompt until the model answers without calling a tool, and
// writes every step to Out: the model's text as thinking, each tool call and
// its result, then the result and the usage. A failure (the LLM, the turn
// limit, an interruption) is written as a result with is_error before the
// usage, and returned.
func (a *Agentic) Run(ctx context.Context, prompt string) error {
	usage := newTally(a.Model)
	final, runErr := a.loop(ctx, prompt, usage)
	return finish(a.Out, a.Model, final, runErr, usage)
}

func (a *Agentic) loop(ctx context.Context, prompt string, usage *tally) (string, error) {
	maxTurns := a.MaxTurns
	if maxTurns <= 0 {
		maxTurns = DefaultMaxTurns
	}
	tools, err := encodeTools(openaiTools(a.Tools.Definitions()))
	if err != nil {
		return "", err
	}
	req := &chatRequest{model: a.Model, conv: &conversation{}, tools: tools}
	if err := req.conv.start(a.System, prompt); err != nil {
		return "", err
	}

	for turn := 1; turn <= maxTurns; turn++ {
		a.Logger.Debug("llm call", "turn", turn, "history_bytes", len(req.conv.json))
		r, err := a.LLM.complete(ctx, req)
		if err != nil {
			return "", err
		}
		usage.add(r.Usage)
		if len(r.ToolCalls) == 0 {
			return r.Text, nil
		}
		if r.Text != "" {
			if err := a.emit(&protocol.AgenticMessage{Type: protocol.Thinking, Content: &r.Text}); err != nil {
				return "", err
			}
		}
		for i := range r.ToolCalls {
			if r.ToolCalls[i].ID == "" {
				r.ToolCalls[i].ID = "call_" + strconv.Itoa(turn) + "_" + strconv.Itoa(i)
			}
		}
		if err := req.conv.add(openai.ChatCompletionMessage{
			Role: openai.ChatMessageRoleAssistant, Content: r.Text, ToolCalls: r.ToolCalls,
		}); err != nil {
			return "", err
		}
		for _, tc := range r.ToolCalls {
			out, err := a.callTool(ctx, tc)
			if err != nil {
				return "", err
			}
			if err := req.conv.add(openai.ChatCompletionMessage{
				Role: openai.ChatMessageRoleTool, Content: out, ToolCallID: tc.ID, Name: tc.Function.Name,
			}); err != nil {
				return "", err
			}
		}
		if ctx.Err() != nil {
			return "", ErrInterrupted
		}
	}
	return "", fmt.Errorf("stopped after %d turns without a final answer: raise the limit (amelia run --max-turns N, or the profile's max_turns) or narrow the task", maxTurns)
}

// callTool runs one tool call and writes it and its result. A tool's
// failure goes back to the model; only a broken stdout is an error here.
func (a *Agentic) callTool(ctx context.Context, tc openai.ToolCall) (string, error) {
	name, id := tc.Function.Name, tc.ID
	args := json.RawMessage(tc.Function.Arguments)
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}") // some models send nothing for no arguments
	}
	call := &protocol.AgenticMessage{Type: protocol.ToolCall, ToolName: &name, ToolCallID: &id}
	if isObject(args) {
		call.ToolInput = args
	}
	if err := a.emit(call); err != nil {
		return "", err
	}
	res := a.Tools.Call(ctx, name, args)
	if res.IsError {
		a.Logger.Debug("tool failed", "tool", name, "output", res.Output)
	}
	err := a.emit(&protocol.AgenticMessage{
		Type: protocol.ToolResult, ToolName: &name, ToolCallID: &id, ToolOutput: &res.Output, IsError: res.IsError,
	})
	return res.Output, err
}

func (a *Agentic) emit(m *protocol.AgenticMessage) error {
	m.Model = &a.Model
	return a.Out.Encode(m)
}

// finish writes the result line (the answer, or the failure with is_error)
// and the usage line, and returns the run's error.
func finish(out *protocol.Encoder, model, answer string, runErr error, usage *tally) error {
	res := &protocol.AgenticMessage{Type: protocol.Result, Content: &answer, Model: &model}
	if runErr != nil {
		msg := runErr.Error()
		res.Content, res.IsError = &msg, true
	}
	if err := out.Encode(res); err != nil {
		return errors.Join(runErr, err)
	}
	if err := out.Encode(usage.message()); err != nil {
		return errors.Join(runErr, err)
	}
	return runErr
}

// Interrupted reports whether err is the failure of an interrupted run.
func Interrupted(err error) bool { return errors.Is(err, ErrInterrupted) }

func openaiTools(defs []tools.Definition) []openai.Tool {
	out := make([]openai.Tool, len(defs))
	for i, d := range defs {
		out[i] = openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: d.Name, Description: d.Description, Parameters: d.Parameters,
		}}
	}
	return out
}

// isObject reports whether b is a JSON object, as tool_input must be.
func isObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}
