package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/run"
	"github.com/amelia-sandbox/amelia/core/runview"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// ScriptedPrefix starts a --model that is played by a scripted model server
// amelia starts on loopback for the run, instead of the profile's upstream:
// scripted:echo, or scripted:FILE for a script of turns. Everything but the
// model is real: the sandbox, the worker, the tunnel, the proxy, git.
const ScriptedPrefix = "scripted:"

// scriptedGeminiKey is the key the proxy sends the scripted model's Gemini
// API, which wants one, as Google does. It is shorter than the proxy
// redacts (a placeholder, not a secret), so that no answer that holds the
// word is mangled.
const scriptedGeminiKey = "none"

// EchoFile is what the echo model writes the prompt to.
const EchoFile = "AMELIA_ECHO.md"

// scriptedTurn is one turn of a script file: what the model says, and the
// tools it calls (with their arguments as a JSON object).
type scriptedTurn struct {
	Text      string `json:"text"`
	ToolCalls []struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"tool_calls"`
}

// scriptedModel is --model as the run records it: a script file's path
// made absolute, so that amelia attach, from any directory, plays the
// same script. Any other model is as given.
func scriptedModel(model string) (string, error) {
	spec, ok := strings.CutPrefix(model, ScriptedPrefix)
	if !ok || spec == "echo" || spec == "" {
		return model, nil
	}
	abs, err := filepath.Abs(spec)
	if err != nil {
		return "", fmt.Errorf("--model %s: %w", model, err)
	}
	return ScriptedPrefix + abs, nil
}

// playScripted starts the scripted model model names and returns p with
// it as its upstream, and what stops it; for any other model, p as it is.
// A run says so once its check has passed (scriptedNote).
func playScripted(p *config.Profile, model string) (*config.Profile, func(), error) {
	spec, ok := strings.CutPrefix(model, ScriptedPrefix)
	if !ok {
		return p, func() {}, nil
	}
	q, srv, err := startScripted(p, spec)
	if err != nil {
		return nil, nil, usageError{err}
	}
	return q, srv.Close, nil
}

// startScripted starts the model server --model names after "scripted:",
// and returns the profile p with it as its upstream (and no key). The
// server keeps none of the requests it answered: a run's would add up to
// the square of its turns. A script's turn is the one after those the
// conversation holds already, so that a server started again (by amelia
// attach) goes on where the agent is.
func startScripted(p *config.Profile, spec string) (*config.Profile, *llmtest.Server, error) {
	opts := llmtest.Options{Forget: true}
	switch spec {
	case "echo":
		opts.Script = echoTurn
	case "":
		return nil, nil, fmt.Errorf("--model %s: name a script: %secho, or %sFILE (a JSON list of turns)", ScriptedPrefix, ScriptedPrefix, ScriptedPrefix)
	default:
		turns, err := readScript(spec)
		if err != nil {
			return nil, nil, err
		}
		opts.Script = scriptTurns(spec, turns)
	}
	srv, err := llmtest.Start(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("start the scripted model: %w", err)
	}
	q := *p
	q.LLM.API, q.LLM.Upstream = "", config.Upstream{BaseURL: srv.URL() + "/v1"}
	q.LLM.Anthropic = nil
	// The same server serves Gemini's API (the gemini agent's, which the
	// proxy does not translate), and wants a key, as Google does: one that
	// is no secret. A profile's own Gemini upstream is never asked.
	q.LLM.Gemini = &config.Upstream{BaseURL: srv.URL(), APIKey: scriptedGeminiKey}
	return &q, srv, nil
}

// scriptTurns plays turns: asked with a conversation that holds n of the
// model's answers, it answers with turn n+1. Past the last turn, it
// answers an error saying so.
func scriptTurns(file string, turns []llmtest.Turn) func(int, *llmtest.Request) llmtest.Turn {
	return func(_ int, req *llmtest.Request) llmtest.Turn {
		n := 0
		for _, m := range req.Chat.Messages {
			if m.Role == "assistant" {
				n++
			}
		}
		for _, c := range req.Gemini.Contents {
			if c.Role == "model" {
				n++
			}
		}
		if n >= len(turns) {
			return llmtest.Turn{Status: http.StatusBadRequest,
				Error: fmt.Sprintf("scripted model: %s has %d turns, and the agent asks for turn %d", file, len(turns), n+1)}
		}
		return turns[n]
	}
}

// echoTurn is the echo model: asked a prompt, it writes it to EchoFile;
// told how that went, it says what it did.
func echoTurn(_ int, req *llmtest.Request) llmtest.Turn {
	prompt, ok := userPrompt(req)
	if !ok {
		return llmtest.Turn{Text: "echo model: I wrote your prompt to " + EchoFile + "."}
	}
	args, _ := json.Marshal(map[string]string{"file_path": EchoFile, "content": prompt + "\n"})
	return llmtest.Turn{
		Text:      "echo model: writing the prompt to " + EchoFile + ".",
		ToolCalls: []llmtest.ToolCall{{Name: "write_file", Arguments: string(args)}},
	}
}

// userPrompt is the text of the request's last message when the user
// wrote it, not a tool's result: in chat completions a user message (tool
// results are tool messages), in Gemini's API a user content without a
// functionResponse part.
func userPrompt(req *llmtest.Request) (string, bool) {
	if cs := req.Gemini.Contents; len(cs) > 0 {
		last := cs[len(cs)-1]
		for _, p := range last.Parts {
			if p.FunctionResponse != nil {
				return "", false
			}
		}
		return last.Text(), last.Role == "user" || last.Role == ""
	}
	msgs := req.Chat.Messages
	if len(msgs) == 0 || msgs[len(msgs)-1].Role != "user" {
		return "", false
	}
	return msgs[len(msgs)-1].Text(), true
}

// readScript reads a script file: a JSON list of turns, played in order.
func readScript(path string) ([]llmtest.Turn, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--model %s%s: %w", ScriptedPrefix, path, err)
	}
	var script []scriptedTurn
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&script); err != nil {
		return nil, fmt.Errorf("--model %s%s: want a JSON list of turns like [{\"text\": \"...\", \"tool_calls\": [{\"name\": \"write_file\", \"arguments\": {...}}]}]: %v", ScriptedPrefix, path, err)
	}
	if len(script) == 0 {
		return nil, fmt.Errorf("--model %s%s: the script has no turns", ScriptedPrefix, path)
	}
	turns := make([]llmtest.Turn, len(script))
	for i, t := range script {
		turns[i].Text = t.Text
		for _, c := range t.ToolCalls {
			if c.Name == "" {
				return nil, fmt.Errorf("--model %s%s: turn %d: a tool call without a name", ScriptedPrefix, path, i+1)
			}
			turns[i].ToolCalls = append(turns[i].ToolCalls, llmtest.ToolCall{Name: c.Name, Arguments: string(c.Arguments)})
		}
	}
	return turns, nil
}

// scriptedNote is view, which says once, when the run's check phase has
// passed, that the model is a scripted one: a run refused at its check
// says only why. For any other model, it is view as it is.
func (a *app) scriptedNote(view runview.View, model string) runview.View {
	if !strings.HasPrefix(model, ScriptedPrefix) {
		return view
	}
	return &afterCheck{View: view, note: func() {
		a.logger.Info(fmt.Sprintf("the model is a scripted one on this machine (%s): no API key is used", model), sdk.ProgressKey, true)
	}}
}

// afterCheck is a view that calls note once the check phase has passed.
type afterCheck struct {
	runview.View
	once sync.Once
	note func()
}

func (v *afterCheck) PhaseEnd(name string, d time.Duration, err error) {
	v.View.PhaseEnd(name, d, err)
	if name == run.PhaseCheck && err == nil {
		v.once.Do(v.note)
	}
}
