package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// This file is the protocol of the persistent worker, `amelia-worker serve`,
// which is also the Python Amelia's (amelia/sandbox/protocol.py): one
// long-lived worker takes many requests on its stdin and answers each with
// frames on its stdout.
//
// A request is [4-byte big-endian length][UTF-8 JSON of a WorkerRequest].
// The answer is newline-delimited ResponseFrames, as pydantic writes them:
//
//	{"frame":"msg","msg":"<one AgenticMessage JSON line, as a string>","error":null}
//	{"frame":"error","msg":null,"error":"<why the command failed>"}
//	{"frame":"done","msg":null,"error":null}
//
// Every command ends with done; error, when the command failed, comes just
// before it.

// MaxRequestBytes is the largest request a serve worker reads: the length
// prefix of a longer one (or of an empty one) is a protocol error.
const MaxRequestBytes = 64 << 20

// requestPrefixBytes is the size of a request's length prefix.
const requestPrefixBytes = 4

// Mode is what a [Request] asks for.
type Mode string

// The modes of a request.
const (
	ModeAgentic  Mode = "agentic"
	ModeGenerate Mode = "generate"
)

// Request is one command for a serve worker: the Python WorkerRequest. Its
// JSON keys are mode, prompt, model, cwd, instructions and schema_path, in
// that order, absent values as null.
type Request struct {
	Mode   Mode
	Prompt string
	Model  string
	// Cwd is the directory an agentic run's tools act in; nil: the
	// worker's own.
	Cwd *string
	// Instructions are an agentic run's extra system instructions, and
	// (amelia's reading; the Python worker ignores them there) a generate
	// call's system prompt.
	Instructions *string
	// SchemaPath is a generate call's schema: a JSON Schema file in the
	// sandbox, or module:ClassName of a pydantic model there.
	SchemaPath *string
	// MaxTurns bounds an agentic run's LLM calls; 0 is the worker's
	// default. It is amelia's own key, max_turns, written after the others
	// only when not 0: the Python model ignores it.
	MaxTurns int
}

// ErrRequestTruncated is matched by the error of [ReadRequest] for input
// that ends inside a request.
var ErrRequestTruncated = errors.New("truncated request")

// AppendRequest appends r as a request frame, the length prefix and the
// JSON as pydantic's model_dump_json writes it. It fails, leaving dst's
// contents unchanged, for an unknown mode or a request longer than
// MaxRequestBytes; the error matches [ErrInvalid].
func AppendRequest(dst []byte, r *Request) ([]byte, error) {
	if r.Mode != ModeAgentic && r.Mode != ModeGenerate {
		return dst, invalidf("unknown mode %s (allowed: agentic, generate)", quoteTrunc([]byte(r.Mode)))
	}
	if r.MaxTurns < 0 {
		return dst, invalidf("max_turns %d is negative", r.MaxTurns)
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = append(dst, `{"mode":"`...)
	dst = append(dst, r.Mode...)
	dst = append(dst, `","prompt":`...)
	dst = AppendString(dst, r.Prompt)
	dst = append(dst, `,"model":`...)
	dst = AppendString(dst, r.Model)
	dst = append(dst, `,"cwd":`...)
	dst = appendStringPtr(dst, r.Cwd)
	dst = append(dst, `,"instructions":`...)
	dst = appendStringPtr(dst, r.Instructions)
	dst = append(dst, `,"schema_path":`...)
	dst = appendStringPtr(dst, r.SchemaPath)
	if r.MaxTurns > 0 {
		dst = append(dst, `,"max_turns":`...)
		dst = strconv.AppendInt(dst, int64(r.MaxTurns), 10)
	}
	dst = append(dst, '}')
	n := len(dst) - start - requestPrefixBytes
	if n > MaxRequestBytes {
		return dst[:start], invalidf("request of %d bytes is larger than the %d-byte limit", n, MaxRequestBytes)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(n))
	return dst, nil
}

// ReadRequest reads one request frame from r. At the end of the input,
// before a request's first byte, it returns io.EOF. Input that ends inside
// a request gives an error matching [ErrRequestTruncated]; a length of 0 or
// above MaxRequestBytes, or JSON that is not a valid request, one matching
// [ErrInvalid]. Either is the end of the protocol: the stream is not
// framed any more.
//
// The JSON is read as pydantic reads a WorkerRequest: mode, prompt and
// model are required strings, mode one of the two modes; cwd,
// instructions and schema_path are strings or null; max_turns (amelia's
// own) an integer >= 0 or null; other keys are ignored; the payload must be
// UTF-8.
func ReadRequest(r io.Reader) (*Request, error) {
	var prefix [requestPrefixBytes]byte
	if n, err := io.ReadFull(r, prefix[:]); err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		if err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("%w: the input ends after %d bytes of the length prefix", ErrRequestTruncated, n)
		}
		return nil, fmt.Errorf("read a request: %w", err)
	}
	size := binary.BigEndian.Uint32(prefix[:])
	if size == 0 || size > MaxRequestBytes {
		return nil, invalidf("request length %d: want 1 to %d bytes", size, MaxRequestBytes)
	}
	// Grown as the bytes arrive, so a length prefix that lies costs no
	// more memory than the bytes that do come.
	var buf bytes.Buffer
	n, err := io.CopyN(&buf, r, int64(size))
	if err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("%w: the input ends after %d of its %d bytes", ErrRequestTruncated, n, size)
		}
		return nil, fmt.Errorf("read a request: %w", err)
	}
	return parseRequest(buf.Bytes())
}

func parseRequest(data []byte) (*Request, error) {
	if !utf8.Valid(data) {
		return nil, invalidf("the request is not UTF-8")
	}
	var p parser
	p.data = data
	if err := p.openObject("request"); err != nil {
		return nil, err
	}
	var (
		req                     Request
		mode, prompt, model     span
		cwd, instructions, spat span
		maxTurns                int64
	)
	err := p.members(func(key []byte) (err error) {
		switch string(key) {
		case "mode":
			err = p.stringValue(&mode, "mode")
		case "prompt":
			err = p.stringValue(&prompt, "prompt")
		case "model":
			err = p.stringValue(&model, "model")
		case "cwd":
			err = p.stringValue(&cwd, "cwd")
		case "instructions":
			err = p.stringValue(&instructions, "instructions")
		case "schema_path":
			err = p.stringValue(&spat, "schema_path")
		case "max_turns":
			maxTurns, err = p.maxTurns()
		default:
			err = p.skipValue(2)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	strs := string(p.arena)
	str := func(s span) string { return strs[s.start:s.end] }
	ptr := func(s span) *string {
		if !s.set {
			return nil
		}
		v := str(s)
		return &v
	}
	for _, f := range []struct {
		s    span
		name string
	}{{mode, "mode"}, {prompt, "prompt"}, {model, "model"}} {
		if !f.s.set {
			return nil, invalidf("%s is required, a string", f.name)
		}
	}
	switch Mode(str(mode)) {
	case ModeAgentic, ModeGenerate:
		req.Mode = Mode(str(mode))
	default:
		return nil, invalidf("unknown mode %s (allowed: agentic, generate)", quoteTrunc([]byte(str(mode))))
	}
	req.Prompt, req.Model = str(prompt), str(model)
	req.Cwd, req.Instructions, req.SchemaPath = ptr(cwd), ptr(instructions), ptr(spat)
	req.MaxTurns = int(maxTurns)
	return &req, nil
}

// maxTurns reads max_turns: an integer from 0 to MaxInt32, or null (0).
func (p *parser) maxTurns() (int64, error) {
	v, _, err := p.int64Value("", "max_turns")
	if err == nil && (v < 0 || v > math.MaxInt32) {
		err = invalidf("max_turns must be an integer from 0 to %d, got %d", math.MaxInt32, v)
	}
	return v, err
}

// FrameKind says what a [Frame] carries.
type FrameKind string

// The frame kinds.
const (
	// FrameMsg carries one message of the command.
	FrameMsg FrameKind = "msg"
	// FrameError says the command failed, and why; done follows.
	FrameError FrameKind = "error"
	// FrameDone ends the command.
	FrameDone FrameKind = "done"
)

// Frame is one line of a serve worker's answer.
type Frame struct {
	Kind FrameKind
	// Msg is the message of a msg frame (nil if its msg is null, which
	// carries nothing).
	Msg *AgenticMessage
	// Error is the error frame's text (nil if null).
	Error *string
}

// AppendMsgFrame appends the msg frame that carries line, one message's
// JSON line without its newline, followed by "\n".
func AppendMsgFrame(dst, line []byte) []byte {
	dst = append(dst, `{"frame":"msg","msg":`...)
	// Not a copy of line: AppendString keeps nothing of what it is given,
	// and this runs for every message a serve worker sends.
	dst = AppendString(dst, unsafe.String(unsafe.SliceData(line), len(line)))
	return append(dst, ",\"error\":null}\n"...)
}

// AppendErrorFrame appends the error frame for the error text msg, followed
// by "\n".
func AppendErrorFrame(dst []byte, msg string) []byte {
	dst = append(dst, `{"frame":"error","msg":null,"error":`...)
	dst = AppendString(dst, msg)
	return append(dst, "}\n"...)
}

// AppendDoneFrame appends the done frame, followed by "\n".
func AppendDoneFrame(dst []byte) []byte {
	return append(dst, "{\"frame\":\"done\",\"msg\":null,\"error\":null}\n"...)
}

// frameLimit is the longest frame line that can carry a message line of
// maxLine bytes: escaping at most doubles it ('"' and '\\'; control
// characters never appear raw in a message line), plus the frame's keys.
func frameLimit(maxLine int) int {
	const overhead = 64
	if maxLine > (math.MaxInt-2-overhead)/2 {
		return math.MaxInt - 2
	}
	return 2*maxLine + overhead
}

// A FrameDecoder reads a serve worker's frames. It is not safe for
// concurrent use.
//
// Its limit (see [WithMaxLineBytes]) is that of the messages the frames
// carry; a frame line may be about twice as long (its escaped msg).
// Errors are as those of [Decoder]: a *[LineError] naming the frame's
// line, matching [ErrInvalid] for a line that is not a frame or carries an
// invalid message, and [ErrLineTooLong] for one too long or carrying a
// message too long. Blank lines are skipped.
type FrameDecoder struct {
	d      *Decoder
	maxMsg int
	msgP   parser
}

// NewFrameDecoder returns a FrameDecoder that reads from r.
func NewFrameDecoder(r io.Reader, opts ...DecoderOption) *FrameDecoder {
	d := NewDecoder(r, opts...)
	fd := &FrameDecoder{d: d, maxMsg: d.max}
	d.max = frameLimit(d.max)
	return fd
}

// Decode reads the next frame. At the end of the input it returns io.EOF.
func (fd *FrameDecoder) Decode() (*Frame, error) {
	for {
		line, err := fd.d.readLine()
		if err != nil {
			return nil, err
		}
		if isBlank(line) {
			continue
		}
		f, err := fd.parseFrame(line)
		fd.d.p.shrink()
		fd.msgP.shrink()
		if err != nil {
			return nil, newLineError(fd.d.line, line, err)
		}
		return f, nil
	}
}

func (fd *FrameDecoder) parseFrame(line []byte) (*Frame, error) {
	p := &fd.d.p
	p.data, p.pos = line, 0
	p.arena = p.arena[:0]
	if err := p.openObject("frame"); err != nil {
		return nil, err
	}
	var kind, msg, errText span
	err := p.members(func(key []byte) (err error) {
		switch string(key) {
		case "frame":
			err = p.stringValue(&kind, "frame")
		case "msg":
			err = p.stringValue(&msg, "msg")
		case "error":
			err = p.stringValue(&errText, "error")
		default:
			err = p.skipValue(2)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if !kind.set {
		return nil, invalidf("missing frame (allowed: msg, error, done)")
	}
	f := &Frame{}
	switch k := p.arena[kind.start:kind.end]; string(k) {
	case string(FrameMsg):
		f.Kind = FrameMsg
	case string(FrameError):
		f.Kind = FrameError
	case string(FrameDone):
		f.Kind = FrameDone
	default:
		return nil, invalidf("unknown frame %s (allowed: msg, error, done)", quoteTrunc(k))
	}
	if errText.set {
		s := string(p.arena[errText.start:errText.end])
		f.Error = &s
	}
	if msg.set && f.Kind == FrameMsg {
		m := p.arena[msg.start:msg.end]
		if len(m) > fd.maxMsg {
			return nil, fmt.Errorf("msg: %w", &tooLongError{fd.maxMsg})
		}
		var err error
		if f.Msg, err = fd.msgP.parseMessage(m); err != nil {
			return nil, fmt.Errorf("msg: %w", err)
		}
	}
	return f, nil
}

// The Python Amelia's identity headers, on the worker's requests to the
// proxy (LLM calls and git credentials): the run token, as Authorization
// carries it, and the profile's name.
const (
	HeaderProxyToken = "X-Amelia-Proxy-Token"
	HeaderProfile    = "X-Amelia-Profile"
)

// members reads the members of the object opened at p.pos, handing each
// key to member, which reads its value; then the closing brace and the end
// of the data. (The message decoder spells this loop out: it is the hot
// path.)
func (p *parser) members(member func(key []byte) error) error {
	for more := p.data[p.pos] != '}'; more; {
		key, err := p.readKey()
		if err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
		if more, err = p.nextMember(); err != nil {
			return err
		}
	}
	p.pos++ // '}'
	return p.end()
}
