package protocol_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

func ExampleEncoder() {
	enc := protocol.NewEncoder(os.Stdout)
	_ = enc.Encode(&protocol.AgenticMessage{
		Type:       protocol.ToolCall,
		ToolName:   new("read_file"),
		ToolInput:  []byte(`{"path": "a.py"}`),
		ToolCallID: new("call_1"),
		Model:      new("m"),
	})
	_ = enc.Encode(&protocol.AgenticMessage{
		Type:  protocol.Usage,
		Usage: &protocol.DriverUsage{InputTokens: new(int64(1200)), CostUSD: new(0.00001)},
	})
	// Output:
	// {"type":"tool_call","content":null,"tool_name":"read_file","tool_input":{"path":"a.py"},"tool_output":null,"tool_call_id":"call_1","session_id":null,"is_error":false,"model":"m","usage":null}
	// {"type":"usage","content":null,"tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":null,"is_error":false,"model":null,"usage":{"input_tokens":1200,"output_tokens":null,"cache_read_tokens":null,"cache_creation_tokens":null,"cost_usd":0.00001,"duration_ms":null,"num_turns":null,"model":null}}
}

func ExampleDecoder() {
	input := `{"type":"thinking","content":"Let me look."}
{"type":"foo"}

{"type":"result","content":"Done.","is_error":false}
`
	dec := protocol.NewDecoder(strings.NewReader(input))
	for {
		m, err := dec.Decode()
		if err == io.EOF {
			break
		}
		if errors.Is(err, protocol.ErrInvalid) || errors.Is(err, protocol.ErrLineTooLong) {
			fmt.Println("skipped:", err)
			continue
		}
		if err != nil {
			fmt.Println("read failed:", err)
			return
		}
		fmt.Printf("line %d: %s %q\n", dec.Line(), m.Type, *m.Content)
	}
	// Output:
	// line 1: thinking "Let me look."
	// skipped: line 2: invalid message: unknown type "foo" (allowed: thinking, tool_call, tool_result, result, usage): {"type":"foo"}
	// line 4: result "Done."
}
