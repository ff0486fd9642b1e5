package llmwire

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// A StreamTranslator translates a streamed response (server-sent events)
// of one API into the other's as its bytes arrive: each translated event
// is written to w as soon as the source event it comes from is complete.
// Write takes the source's bytes in pieces of any size; Close ends the
// translated stream (an error event if the source ended early).
type StreamTranslator struct {
	from API
	info RequestInfo
	w    io.Writer
	sse  *sseParser
	err  error // from w
	done bool  // the translated stream has ended

	// OpenAI → Anthropic
	started   bool
	open      int         // the open content block's index, -1 if none
	openText  bool        // ... and whether it is a text block
	next      int         // the next block's index
	toolBlock map[int]int // OpenAI tool call index → block index
	closed    map[int]bool
	finish    string
	usage     *ChatUsage
	msgID     string
	model     string

	// Anthropic → OpenAI
	chunkID   string
	created   int64
	toolIndex map[int]int  // block index → OpenAI tool call index
	toolArgs  map[int]bool // the block's tool call has had arguments
	stop      string
	msgUsage  Usage
}

// NewStreamTranslator returns a translator of a stream of from's API (the
// upstream's) into the other's (the client's, whose request info
// describes) that writes to w.
func NewStreamTranslator(from API, w io.Writer, info RequestInfo) *StreamTranslator {
	t := &StreamTranslator{from: from, info: info, w: w, open: -1, toolBlock: map[int]int{}, closed: map[int]bool{}, toolIndex: map[int]int{}, toolArgs: map[int]bool{}, created: time.Now().Unix()}
	t.sse = &sseParser{max: MaxKept, onEvent: t.event}
	return t
}

// Write translates the complete events in p (with what came before).
func (t *StreamTranslator) Write(p []byte) (int, error) {
	if t.err != nil {
		return 0, t.err
	}
	t.sse.write(p)
	return len(p), t.err
}

// Close ends the source: a stream that had not ended properly is ended
// with an error event in the client's API.
func (t *StreamTranslator) Close() error {
	t.sse.finish()
	if !t.done {
		if t.from == OpenAI && t.finish != "" {
			t.endAnthropic() // an upstream that sends no [DONE]
		} else {
			msg := "the upstream's stream ended before the response did"
			if t.sse.err != nil {
				msg = "the upstream's stream could not be translated: " + t.sse.err.Error()
			}
			t.fail("api_error", msg)
		}
	}
	return t.err
}

func (t *StreamTranslator) event(_ string, data []byte) {
	if t.done || t.err != nil {
		return
	}
	if t.from == OpenAI {
		t.fromChatChunk(data)
	} else {
		t.fromMessagesEvent(data)
	}
}

// fail ends the translated stream with an error event in the client's
// API.
func (t *StreamTranslator) fail(typ, msg string) {
	if t.from == OpenAI {
		t.emitAnthropic(MessagesStreamEvent{Type: "error", Error: &MessagesErrorBody{Type: anthropicType(typ), Message: msg}})
	} else {
		t.emitOpenAI(json.RawMessage(ErrorBody(OpenAI, 0, typ, msg)))
	}
	t.done = true
}

func anthropicType(typ string) string {
	if anthropicErrorTypes[typ] {
		return typ
	}
	return "api_error"
}

func (t *StreamTranslator) emitAnthropic(ev MessagesStreamEvent) {
	b, err := marshal(ev)
	if err != nil {
		t.err = err
		return
	}
	t.write("event: " + ev.Type + "\ndata: " + string(b) + "\n\n")
}

func (t *StreamTranslator) emitOpenAI(v any) {
	b, err := marshal(v)
	if err != nil {
		t.err = err
		return
	}
	t.write("data: " + string(b) + "\n\n")
}

func (t *StreamTranslator) write(s string) {
	if t.err == nil {
		_, t.err = io.WriteString(t.w, s)
	}
}

// --- OpenAI chunks → Anthropic events ---

func (t *StreamTranslator) fromChatChunk(data []byte) {
	if isDone(data) {
		t.endAnthropic()
		return
	}
	var c ChatChunk
	if err := json.Unmarshal(data, &c); err != nil {
		t.fail("api_error", fmt.Sprintf("the upstream sent a chunk that is not a chat completion chunk: %v", err))
		return
	}
	if c.Error != nil {
		t.fail(c.Error.Type, c.Error.Message)
		return
	}
	if !t.started {
		t.started = true
		t.msgID, t.model = messageID(c.ID), c.Model
		t.emitAnthropic(MessagesStreamEvent{Type: "message_start", Message: &MessagesResponse{
			ID: t.msgID, Type: "message", Role: "assistant", Model: c.Model, Content: []ContentBlock{}, Usage: MessagesUsage{},
		}})
	}
	if c.Usage != nil {
		t.usage = c.Usage
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		if d := ch.Delta.Content; d != nil && *d != "" {
			if !t.openText {
				t.startBlock(ContentBlock{Type: "text"}, true)
			}
			t.emitAnthropic(MessagesStreamEvent{Type: "content_block_delta", Index: ptr(t.open), Delta: &StreamDelta{Type: "text_delta", Text: *d}})
		}
		for k, tc := range ch.Delta.ToolCalls {
			i := k
			if tc.Index != nil {
				i = *tc.Index
			}
			idx, ok := t.toolBlock[i]
			if !ok {
				t.startBlock(ContentBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: json.RawMessage("{}")}, false)
				idx = t.open
				t.toolBlock[i] = idx
			}
			if tc.Function.Arguments == "" {
				continue
			}
			if t.closed[idx] {
				t.fail("api_error", "the upstream interleaved the arguments of its tool calls, which Anthropic's stream cannot carry")
				return
			}
			t.emitAnthropic(MessagesStreamEvent{Type: "content_block_delta", Index: ptr(idx), Delta: &StreamDelta{Type: "input_json_delta", PartialJSON: tc.Function.Arguments}})
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			t.finish = *ch.FinishReason
			t.closeBlock()
		}
	}
}

func ptr[T any](v T) *T { return &v }

func (t *StreamTranslator) startBlock(b ContentBlock, text bool) {
	t.closeBlock()
	t.open, t.openText = t.next, text
	t.next++
	t.emitAnthropic(MessagesStreamEvent{Type: "content_block_start", Index: ptr(t.open), ContentBlock: &b})
}

func (t *StreamTranslator) closeBlock() {
	if t.open < 0 {
		return
	}
	t.emitAnthropic(MessagesStreamEvent{Type: "content_block_stop", Index: ptr(t.open)})
	t.closed[t.open] = true
	t.open, t.openText = -1, false
}

// endAnthropic ends the Anthropic stream: the stop reason and the usage
// (OpenAI reports it last), then message_stop.
func (t *StreamTranslator) endAnthropic() {
	if !t.started || t.finish == "" {
		t.fail("api_error", "the upstream's stream ended before the response did")
		return
	}
	t.closeBlock()
	stop := StopToAnthropic(t.finish)
	u := UsageToAnthropic(t.usage)
	t.emitAnthropic(MessagesStreamEvent{Type: "message_delta", Delta: &StreamDelta{StopReason: &stop}, Usage: &u})
	t.emitAnthropic(MessagesStreamEvent{Type: "message_stop"})
	t.done = true
}

// --- Anthropic events → OpenAI chunks ---

func (t *StreamTranslator) chunk(delta ChatDelta, finish *string) ChatChunk {
	return ChatChunk{ID: t.chunkID, Object: "chat.completion.chunk", Created: t.created, Model: t.model,
		Choices: []ChatChunkChoice{{Index: 0, Delta: delta, FinishReason: finish}}}
}

func (t *StreamTranslator) fromMessagesEvent(data []byte) {
	var ev MessagesStreamEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		t.fail("server_error", fmt.Sprintf("the upstream sent an event that is not a message stream event: %v", err))
		return
	}
	idx := 0
	if ev.Index != nil {
		idx = *ev.Index
	}
	switch ev.Type {
	case "message_start":
		if ev.Message == nil {
			return
		}
		t.started = true
		t.chunkID, t.model = completionID(ev.Message.ID), ev.Message.Model
		t.msgUsage = ev.Message.Usage.Usage()
		empty := ""
		t.emitOpenAI(t.chunk(ChatDelta{Role: "assistant", Content: &empty}, nil))
	case "content_block_start":
		b := ev.ContentBlock
		switch {
		case b == nil:
		case b.Type == "text" && b.Text != "":
			t.emitOpenAI(t.chunk(ChatDelta{Content: &b.Text}, nil))
		case b.Type == "tool_use":
			k := len(t.toolIndex)
			t.toolIndex[idx] = k
			args := ""
			if in := compact(b.Input); len(in) > 0 && string(in) != "{}" {
				args = string(in)
				t.toolArgs[idx] = true
			}
			t.emitOpenAI(t.chunk(ChatDelta{ToolCalls: []ChatToolCall{{Index: &k, ID: b.ID, Type: "function", Function: ChatFunctionCall{Name: b.Name, Arguments: args}}}}, nil))
		}
	case "content_block_delta":
		d := ev.Delta
		if d == nil {
			return
		}
		switch d.Type {
		case "text_delta":
			if d.Text != "" {
				t.emitOpenAI(t.chunk(ChatDelta{Content: &d.Text}, nil))
			}
		case "input_json_delta":
			k, ok := t.toolIndex[idx]
			if ok && d.PartialJSON != "" {
				t.toolArgs[idx] = true
				t.emitOpenAI(t.chunk(ChatDelta{ToolCalls: []ChatToolCall{{Index: &k, Function: ChatFunctionCall{Arguments: d.PartialJSON}}}}, nil))
			}
		}
	case "content_block_stop":
		// A tool call without arguments has {} for them, as OpenAI sends.
		if k, ok := t.toolIndex[idx]; ok && !t.toolArgs[idx] {
			t.toolArgs[idx] = true
			t.emitOpenAI(t.chunk(ChatDelta{ToolCalls: []ChatToolCall{{Index: &k, Function: ChatFunctionCall{Arguments: "{}"}}}}, nil))
		}
	case "message_delta":
		if ev.Delta != nil && ev.Delta.StopReason != nil {
			t.stop = *ev.Delta.StopReason
		}
		if ev.Usage != nil {
			mergeMessagesUsage(&t.msgUsage, ev.Usage)
		}
	case "message_stop":
		if !t.started {
			t.fail("server_error", "the upstream's stream ended before the response began")
			return
		}
		finish := StopToOpenAI(t.stop)
		t.emitOpenAI(t.chunk(ChatDelta{}, &finish))
		if t.info.IncludeUsage {
			t.emitOpenAI(ChatChunk{ID: t.chunkID, Object: "chat.completion.chunk", Created: t.created, Model: t.model, Choices: []ChatChunkChoice{}, Usage: UsageToOpenAI(t.msgUsage)})
		}
		t.write("data: [DONE]\n\n")
		t.done = true
	case "error":
		typ, msg := "server_error", "the upstream's stream failed"
		if ev.Error != nil {
			typ, msg = ev.Error.Type, ev.Error.Message
		}
		t.fail(typ, msg)
	}
}
