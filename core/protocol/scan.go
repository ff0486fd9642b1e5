package protocol

import (
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// This file is a small hand-written JSON parser for the fixed shape of the
// protocol's messages. It is several times faster than encoding/json for
// typical lines (see bench_test.go) and allocates at most four times per
// message: the message, its strings (all in one block), its tool_input and
// its usage.

// maxDepth is the deepest nesting of objects and arrays that a line may have,
// the message object included. It is the limit of pydantic's JSON parser, so
// the lines this package accepts and writes are the lines pydantic reads.
const maxDepth = 200

// maxIntegerPart is the longest integer part of a number (the sign
// included) that pydantic's JSON parser reads: Python's limit on the digits
// of an int (sys.get_int_max_str_digits).
const maxIntegerPart = 4300

// parser parses one JSON document held in data. Its buffers are reused from
// one document to the next.
type parser struct {
	data    []byte
	pos     int
	arena   []byte // the decoded contents of the message's strings
	ti      []byte // the compacted tool_input
	key     []byte // the decoded current key
	scratch []byte // values that are parsed and thrown away
}

// shrink drops the buffers that grew too large to keep.
func (p *parser) shrink() {
	p.arena = shrink(p.arena)
	p.ti = shrink(p.ti)
	p.key = shrink(p.key)
	p.scratch = shrink(p.scratch)
}

// A span is a string of the message, arena[start:end]; set is false for
// null.
type span struct {
	start, end int
	set        bool
}

// Indices of the message's strings in rawMessage.strs and messageBlock.s.
const (
	sContent = iota
	sToolName
	sToolOutput
	sToolCallID
	sSessionID
	sModel
	numStrings
)

// Indices of the usage's integers in rawUsage.ints and usageBlock.ints.
const (
	iInputTokens = iota
	iOutputTokens
	iCacheReadTokens
	iCacheCreationTokens
	iDurationMs
	iNumTurns
	iContextTokens
	iContextWindowTokens
	numInts
)

// Indices of the usage's floats in rawUsage.floats and usageBlock.floats.
const (
	fCostUSD = iota
	fContextUtilization
	fContextWarningThreshold
	numFloats
)

// rawMessage is a parsed message before its strings are allocated.
type rawMessage struct {
	typ       MessageType
	typeSet   bool
	strs      [numStrings]span
	toolInput bool // tool_input is an object, in parser.ti
	isError   bool
	usage     bool // usage is an object, in u
	u         rawUsage
}

type rawUsage struct {
	ints       [numInts]int64
	intSet     [numInts]bool
	floats     [numFloats]float64
	floatSet   [numFloats]bool
	warning    bool // context_window_warning
	warningSet bool
	context    bool // one of the Python host's context keys was there
	model      span
}

// messageBlock and usageBlock hold a message or a usage together with the
// values its pointers point to, so that they take a single allocation.
type messageBlock struct {
	m AgenticMessage
	s [numStrings]string
}

type usageBlock struct {
	u       DriverUsage
	ints    [numInts]int64
	floats  [numFloats]float64
	warning bool
	model   string
}

// parseMessage parses data, a whole JSON document, as an AgenticMessage.
func (p *parser) parseMessage(data []byte) (*AgenticMessage, error) {
	p.data, p.pos = data, 0
	p.arena = p.arena[:0]
	var r rawMessage
	if err := p.openObject("message"); err != nil {
		return nil, err
	}
	for more := p.data[p.pos] != '}'; more; {
		key, err := p.readKey()
		if err != nil {
			return nil, err
		}
		switch string(key) {
		case "type":
			err = p.parseType(&r)
		case "content":
			err = p.stringValue(&r.strs[sContent], "content")
		case "tool_name":
			err = p.stringValue(&r.strs[sToolName], "tool_name")
		case "tool_input":
			err = p.toolInputValue(&r)
		case "tool_output":
			err = p.stringValue(&r.strs[sToolOutput], "tool_output")
		case "tool_call_id":
			err = p.stringValue(&r.strs[sToolCallID], "tool_call_id")
		case "session_id":
			err = p.stringValue(&r.strs[sSessionID], "session_id")
		case "is_error":
			r.isError, err = p.boolValue("is_error")
		case "model":
			err = p.stringValue(&r.strs[sModel], "model")
		case "usage":
			err = p.usageValue(&r)
		default:
			err = p.skipValue(2)
		}
		if err != nil {
			return nil, err
		}
		if more, err = p.nextMember(); err != nil {
			return nil, err
		}
	}
	p.pos++ // '}'
	if err := p.end(); err != nil {
		return nil, err
	}
	if !r.typeSet {
		return nil, invalidf("missing type (allowed: %s)", allowedTypes)
	}
	return p.buildMessage(&r), nil
}

// parseUsageDocument parses data, a whole JSON document, as a DriverUsage.
func (p *parser) parseUsageDocument(data []byte) (*DriverUsage, error) {
	p.data, p.pos = data, 0
	p.arena = p.arena[:0]
	var r rawUsage
	if err := p.openObject("usage"); err != nil {
		return nil, err
	}
	if err := p.usageMembers(&r, ""); err != nil {
		return nil, err
	}
	if err := p.end(); err != nil {
		return nil, err
	}
	var strs string
	if len(p.arena) > 0 {
		strs = string(p.arena)
	}
	return buildUsage(&r, strs), nil
}

// openObject skips leading space and the '{' of a document's object, and
// the space after it, so that p.data[p.pos] is the first key or '}'.
func (p *parser) openObject(what string) error {
	p.skipSpace()
	if p.pos >= len(p.data) {
		return p.syntaxError("")
	}
	if c := p.data[p.pos]; c != '{' {
		if k, ok := kindOf(c); ok {
			return invalidf("a %s must be a JSON object, got %s", what, k)
		}
		return p.syntaxError("")
	}
	p.pos++
	p.skipSpace()
	if p.pos >= len(p.data) {
		return p.syntaxError("in object")
	}
	return nil
}

// end checks that only space follows the document's value.
func (p *parser) end() error {
	p.skipSpace()
	if p.pos < len(p.data) {
		return p.syntaxError("after the object")
	}
	return nil
}

// readKey reads an object key and the ':' after it, and skips to the value.
// The key is valid until the next call.
func (p *parser) readKey() ([]byte, error) {
	if p.data[p.pos] != '"' {
		return nil, p.syntaxError("where a key was expected")
	}
	var err error
	if p.key, err = p.appendString(p.key[:0]); err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos >= len(p.data) || p.data[p.pos] != ':' {
		return nil, p.syntaxError("after a key")
	}
	p.pos++
	p.skipSpace()
	if p.pos >= len(p.data) {
		return nil, p.syntaxError("where a value was expected")
	}
	return p.key, nil
}

// nextMember reads the ',' or '}' after an object member. It reports
// whether another member follows, and leaves p.pos at its key, or at '}'.
func (p *parser) nextMember() (bool, error) {
	p.skipSpace()
	if p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
			if p.pos >= len(p.data) {
				return false, p.syntaxError("where a key was expected")
			}
			return true, nil
		case '}':
			return false, nil
		}
	}
	return false, p.syntaxError("after an object member")
}

func (p *parser) parseType(r *rawMessage) error {
	if p.data[p.pos] != '"' {
		return p.typeError("type", "a string")
	}
	var err error
	if p.scratch, err = p.appendString(p.scratch[:0]); err != nil {
		return err
	}
	switch string(p.scratch) {
	case string(Thinking):
		r.typ = Thinking
	case string(ToolCall):
		r.typ = ToolCall
	case string(ToolResult):
		r.typ = ToolResult
	case string(Result):
		r.typ = Result
	case string(Usage):
		r.typ = Usage
	default:
		return invalidf("unknown type %s (allowed: %s)", quoteTrunc(p.scratch), allowedTypes)
	}
	r.typeSet = true
	return nil
}

// stringValue reads a string or null into s.
func (p *parser) stringValue(s *span, name string) error {
	switch p.data[p.pos] {
	case '"':
		start := len(p.arena)
		var err error
		if p.arena, err = p.appendString(p.arena); err != nil {
			return err
		}
		*s = span{start: start, end: len(p.arena), set: true}
		return nil
	case 'n':
		*s = span{}
		return p.literal("null")
	}
	return p.typeError(name, "a string or null")
}

func (p *parser) boolValue(name string) (bool, error) {
	switch p.data[p.pos] {
	case 't':
		return true, p.literal("true")
	case 'f':
		return false, p.literal("false")
	}
	return false, p.typeError(name, "true or false")
}

func (p *parser) toolInputValue(r *rawMessage) error {
	switch p.data[p.pos] {
	case '{':
		var err error
		p.ti, err = p.appendCompact(p.ti[:0], 2)
		r.toolInput = err == nil
		return err
	case 'n':
		r.toolInput = false
		return p.literal("null")
	}
	return p.typeError("tool_input", "a JSON object or null")
}

func (p *parser) usageValue(r *rawMessage) error {
	switch p.data[p.pos] {
	case '{':
		r.u = rawUsage{}
		r.usage = true
		p.pos++
		p.skipSpace()
		if p.pos >= len(p.data) {
			return p.syntaxError("in object")
		}
		return p.usageMembers(&r.u, "usage.")
	case 'n':
		r.usage = false
		return p.literal("null")
	}
	return p.typeError("usage", "an object or null")
}

// usageMembers reads the members of a usage object and its closing '}';
// p.pos is at the first key or the '}'. prefix is prepended to the keys in
// error messages.
func (p *parser) usageMembers(r *rawUsage, prefix string) error {
	for more := p.data[p.pos] != '}'; more; {
		key, err := p.readKey()
		if err != nil {
			return err
		}
		switch string(key) {
		case "input_tokens":
			err = p.intValue(r, iInputTokens, prefix, "input_tokens")
		case "output_tokens":
			err = p.intValue(r, iOutputTokens, prefix, "output_tokens")
		case "cache_read_tokens":
			err = p.intValue(r, iCacheReadTokens, prefix, "cache_read_tokens")
		case "cache_creation_tokens":
			err = p.intValue(r, iCacheCreationTokens, prefix, "cache_creation_tokens")
		case "cost_usd":
			err = p.floatValue(r, fCostUSD, prefix, "cost_usd")
		case "duration_ms":
			err = p.intValue(r, iDurationMs, prefix, "duration_ms")
		case "num_turns":
			err = p.intValue(r, iNumTurns, prefix, "num_turns")
		case "model":
			err = p.stringValue(&r.model, prefix+"model")
		case "context_tokens":
			r.context = true
			err = p.intValue(r, iContextTokens, prefix, "context_tokens")
		case "context_window_tokens":
			r.context = true
			err = p.intValue(r, iContextWindowTokens, prefix, "context_window_tokens")
		case "context_utilization":
			r.context = true
			err = p.floatValue(r, fContextUtilization, prefix, "context_utilization")
		case "context_warning_threshold":
			r.context = true
			err = p.floatValue(r, fContextWarningThreshold, prefix, "context_warning_threshold")
		case "context_window_warning":
			r.context = true
			err = p.nullableBool(&r.warning, &r.warningSet, prefix+"context_window_warning")
		default:
			err = p.skipValue(3)
		}
		if err != nil {
			return err
		}
		if more, err = p.nextMember(); err != nil {
			return err
		}
	}
	p.pos++ // '}'
	return nil
}

// intValue reads an integer or null into r.ints[i]. Like pydantic, it takes
// a number written as a float if its value is integral (1.0, 1e3).
func (p *parser) intValue(r *rawUsage, i int, prefix, name string) error {
	v, null, err := p.int64Value(prefix, name)
	if err == nil {
		r.ints[i], r.intSet[i] = v, !null
	}
	return err
}

// int64Value reads an integer or null (null reports true). As in
// pydantic's lax mode, a number with a fraction or exponent counts when its
// value is whole (2.0). Errors name the key prefix+name (joined only for
// them: this runs for every integer of every line).
func (p *parser) int64Value(prefix, name string) (v int64, null bool, err error) {
	c := p.data[p.pos]
	if c == 'n' {
		return 0, true, p.literal("null")
	}
	if c != '-' && (c < '0' || c > '9') {
		return 0, false, p.typeError(prefix+name, "an integer or null")
	}
	tok, err := p.number()
	if err != nil {
		return 0, false, err
	}
	integer := true
	for _, c := range tok {
		if c == '.' || c == 'e' || c == 'E' {
			integer = false
			break
		}
	}
	if integer {
		v, err = strconv.ParseInt(string(tok), 10, 64)
		if err != nil {
			return 0, false, invalidf("%s%s: %s is out of range for a 64-bit integer", prefix, name, truncate(tok))
		}
		return v, false, nil
	}
	f, _ := strconv.ParseFloat(string(tok), 64)
	if f != math.Trunc(f) {
		return 0, false, invalidf("%s%s must be an integer, got %s", prefix, name, truncate(tok))
	}
	if f < -(1<<63) || f >= 1<<63 {
		return 0, false, invalidf("%s%s: %s is out of range for a 64-bit integer", prefix, name, truncate(tok))
	}
	return int64(f), false, nil
}

// floatValue reads a number or null into r.floats[i]. Numbers beyond the
// range of float64 read as ±Inf, as in pydantic.
func (p *parser) floatValue(r *rawUsage, i int, prefix, name string) error {
	c := p.data[p.pos]
	if c == 'n' {
		r.floatSet[i] = false
		return p.literal("null")
	}
	if c != '-' && (c < '0' || c > '9') {
		return p.typeError(prefix+name, "a number or null")
	}
	tok, err := p.number()
	if err != nil {
		return err
	}
	// The grammar is checked; the only possible error is ErrRange, with ±Inf.
	r.floats[i], _ = strconv.ParseFloat(string(tok), 64)
	r.floatSet[i] = true
	return nil
}

// nullableBool reads true, false or null into *v and *set.
func (p *parser) nullableBool(v, set *bool, name string) error {
	if p.data[p.pos] == 'n' {
		*set = false
		return p.literal("null")
	}
	var err error
	*v, err = p.boolValue(name)
	*set = err == nil
	return err
}

// buildMessage allocates the message that r describes.
func (p *parser) buildMessage(r *rawMessage) *AgenticMessage {
	b := new(messageBlock)
	m := &b.m
	m.Type = r.typ
	m.IsError = r.isError
	var strs string
	if len(p.arena) > 0 {
		strs = string(p.arena)
	}
	ptrs := [numStrings]**string{&m.Content, &m.ToolName, &m.ToolOutput, &m.ToolCallID, &m.SessionID, &m.Model}
	for i, s := range r.strs {
		if s.set {
			b.s[i] = strs[s.start:s.end]
			*ptrs[i] = &b.s[i]
		}
	}
	if r.toolInput {
		m.ToolInput = append(make([]byte, 0, len(p.ti)), p.ti...)
	}
	if r.usage {
		m.Usage = buildUsage(&r.u, strs)
	}
	return m
}

// buildUsage allocates the usage that r describes; strs holds the arena.
func buildUsage(r *rawUsage, strs string) *DriverUsage {
	b := new(usageBlock)
	u := &b.u
	ptrs := [numInts]**int64{&u.InputTokens, &u.OutputTokens, &u.CacheReadTokens, &u.CacheCreationTokens, &u.DurationMs, &u.NumTurns,
		&u.ContextTokens, &u.ContextWindowTokens}
	for i, set := range r.intSet {
		if set {
			b.ints[i] = r.ints[i]
			*ptrs[i] = &b.ints[i]
		}
	}
	fptrs := [numFloats]**float64{&u.CostUSD, &u.ContextUtilization, &u.ContextWarningThreshold}
	for i, set := range r.floatSet {
		if set {
			b.floats[i] = r.floats[i]
			*fptrs[i] = &b.floats[i]
		}
	}
	if r.warningSet {
		b.warning = r.warning
		u.ContextWindowWarning = &b.warning
	}
	u.ContextFields = r.context
	if r.model.set {
		b.model = strs[r.model.start:r.model.end]
		u.Model = &b.model
	}
	return u
}

// skipValue checks the syntax of the value at p.pos and skips it. depth is
// the nesting depth the value has if it is an object or an array.
func (p *parser) skipValue(depth int) error {
	var err error
	p.scratch, err = p.appendCompact(p.scratch[:0], depth)
	return err
}

// appendCompact checks the syntax of the value at p.pos, appends it to dst
// without insignificant space, and skips it. Strings are copied with their
// escapes as they are, except that invalid UTF-8 becomes U+FFFD and the
// escape of a lone UTF-16 surrogate becomes \ufffd. depth is the nesting
// depth the value has if it is an object or an array.
func (p *parser) appendCompact(dst []byte, depth int) ([]byte, error) {
	if p.pos >= len(p.data) {
		return dst, p.syntaxError("where a value was expected")
	}
	var err error
	switch c := p.data[p.pos]; c {
	case '{', '[':
		if depth > maxDepth {
			return dst, invalidf("nested deeper than %d levels at column %d", maxDepth, p.pos+1)
		}
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		dst = append(dst, c)
		p.pos++
		p.skipSpace()
		if p.pos < len(p.data) && p.data[p.pos] == closing {
			p.pos++
			return append(dst, closing), nil
		}
		for {
			if c == '{' {
				if p.pos >= len(p.data) || p.data[p.pos] != '"' {
					return dst, p.syntaxError("where a key was expected")
				}
				if dst, err = p.appendRawString(dst); err != nil {
					return dst, err
				}
				p.skipSpace()
				if p.pos >= len(p.data) || p.data[p.pos] != ':' {
					return dst, p.syntaxError("after a key")
				}
				dst = append(dst, ':')
				p.pos++
				p.skipSpace()
			}
			if dst, err = p.appendCompact(dst, depth+1); err != nil {
				return dst, err
			}
			p.skipSpace()
			if p.pos >= len(p.data) {
				return dst, p.syntaxError("in " + kindName(c))
			}
			switch p.data[p.pos] {
			case ',':
				dst = append(dst, ',')
				p.pos++
				p.skipSpace()
				continue
			case closing:
				p.pos++
				return append(dst, closing), nil
			}
			return dst, p.syntaxError("in " + kindName(c))
		}
	case '"':
		return p.appendRawString(dst)
	case 't':
		return append(dst, "true"...), p.literal("true")
	case 'f':
		return append(dst, "false"...), p.literal("false")
	case 'n':
		return append(dst, "null"...), p.literal("null")
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			tok, err := p.number()
			return append(dst, tok...), err
		}
		return dst, p.syntaxError("where a value was expected")
	}
}

func kindName(open byte) string {
	if open == '{' {
		return "object"
	}
	return "array"
}

// plainString[c] is true for the bytes that need no attention inside a JSON
// string: ASCII other than '"', '\\' and control characters.
var plainString = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// unescape[c] is what the escape \c stands for in a JSON string, or 0
// for a c that makes no one-character escape.
var unescape = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// appendString reads the JSON string at p.pos and appends its decoded
// contents to dst. Invalid UTF-8 and lone surrogates become U+FFFD.
func (p *parser) appendString(dst []byte) ([]byte, error) {
	data := p.data
	i := p.pos + 1
	start := i
	for {
		for i < len(data) && plainString[data[i]] {
			i++
		}
		if i >= len(data) {
			p.pos = i
			return dst, p.syntaxError("in string")
		}
		switch c := data[i]; {
		case c == '"':
			p.pos = i + 1
			return append(dst, data[start:i]...), nil
		case c == '\\':
			dst = append(dst, data[start:i]...)
			if i+1 >= len(data) {
				p.pos = i + 1
				return dst, p.syntaxError("in string escape")
			}
			switch e := data[i+1]; {
			case unescape[e] != 0:
				dst = append(dst, unescape[e])
				i += 2
			case e == 'u':
				r, bad := hex4(data, i+2)
				if bad >= 0 {
					p.pos = bad
					return dst, p.syntaxError("in \\u escape")
				}
				i += 6
				if r >= 0xD800 && r < 0xDC00 && i+6 <= len(data) && data[i] == '\\' && data[i+1] == 'u' {
					if lo, bad := hex4(data, i+2); bad < 0 && lo >= 0xDC00 && lo < 0xE000 {
						r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
						i += 6
					}
				}
				dst = utf8.AppendRune(dst, r) // a lone surrogate becomes U+FFFD
			default:
				p.pos = i + 1
				return dst, p.syntaxError("in string escape")
			}
			start = i
		case c < 0x20:
			p.pos = i
			return dst, p.syntaxError("in string")
		default:
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, data[start:i]...)
				dst = append(dst, "\uFFFD"...)
				start = i + 1
			}
			i += size
		}
	}
}

// appendRawString reads the JSON string at p.pos and appends it to dst, with
// its quotes and its escapes as they are, except that invalid UTF-8 becomes
// U+FFFD and the escape of a lone surrogate becomes \ufffd.
func (p *parser) appendRawString(dst []byte) ([]byte, error) {
	data := p.data
	start := p.pos
	i := p.pos + 1
	for {
		for i < len(data) && plainString[data[i]] {
			i++
		}
		if i >= len(data) {
			p.pos = i
			return dst, p.syntaxError("in string")
		}
		switch c := data[i]; {
		case c == '"':
			p.pos = i + 1
			return append(dst, data[start:i+1]...), nil
		case c == '\\':
			if i+1 >= len(data) {
				p.pos = i + 1
				return dst, p.syntaxError("in string escape")
			}
			switch e := data[i+1]; {
			case unescape[e] != 0:
				i += 2
			case e == 'u':
				r, bad := hex4(data, i+2)
				if bad >= 0 {
					p.pos = bad
					return dst, p.syntaxError("in \\u escape")
				}
				switch {
				case r >= 0xD800 && r < 0xDC00:
					if i+12 <= len(data) && data[i+6] == '\\' && data[i+7] == 'u' {
						if lo, bad := hex4(data, i+8); bad < 0 && lo >= 0xDC00 && lo < 0xE000 {
							i += 12 // a valid pair
							continue
						}
					}
					fallthrough
				case r >= 0xDC00 && r < 0xE000:
					dst = append(dst, data[start:i]...)
					dst = append(dst, `\ufffd`...)
					start = i + 6
				}
				i += 6
			default:
				p.pos = i + 1
				return dst, p.syntaxError("in string escape")
			}
		case c < 0x20:
			p.pos = i
			return dst, p.syntaxError("in string")
		default:
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, data[start:i]...)
				dst = append(dst, "\uFFFD"...)
				start = i + 1
			}
			i += size
		}
	}
}

// hex4 decodes the four hex digits at data[i:]. If they are not, it returns
// the index of the first byte that is not a hex digit (or len(data)).
func hex4(data []byte, i int) (r rune, bad int) {
	for j := i; j < i+4; j++ {
		if j >= len(data) {
			return 0, j
		}
		c := data[j]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, j
		}
		r = r<<4 | rune(c)
	}
	return r, -1
}

// number reads the JSON number at p.pos, checking its grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *parser) number() ([]byte, error) {
	data := p.data
	start, i := p.pos, p.pos
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		i = digits(data, i+1)
		if i-start > maxIntegerPart {
			return nil, invalidf("number out of range at column %d (pydantic reads at most %d characters before the decimal point)", start+1, maxIntegerPart)
		}
	default:
		p.pos = i
		return nil, p.syntaxError("in number")
	}
	if i < len(data) && data[i] == '.' {
		j := digits(data, i+1)
		if j == i+1 {
			p.pos = j
			return nil, p.syntaxError("in number")
		}
		i = j
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		j := digits(data, i)
		if j == i {
			p.pos = j
			return nil, p.syntaxError("in number")
		}
		i = j
	}
	p.pos = i
	return data[start:i], nil
}

func digits(data []byte, i int) int {
	for i < len(data) && data[i] >= '0' && data[i] <= '9' {
		i++
	}
	return i
}

// literal reads the literal lit (true, false or null) at p.pos.
func (p *parser) literal(lit string) error {
	end := p.pos + len(lit)
	if end > len(p.data) || string(p.data[p.pos:end]) != lit {
		for i := 0; i < len(lit) && p.pos < len(p.data) && p.data[p.pos] == lit[i]; i++ {
			p.pos++
		}
		return p.syntaxError("in literal")
	}
	p.pos = end
	return nil
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) && isSpace(p.data[p.pos]) {
		p.pos++
	}
}

// isSpace reports whether c is JSON white space.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

// kindOf names the kind of JSON value that starts with c.
func kindOf(c byte) (string, bool) {
	switch {
	case c == '{':
		return "object", true
	case c == '[':
		return "array", true
	case c == '"':
		return "string", true
	case c == 't' || c == 'f':
		return "boolean", true
	case c == 'n':
		return "null", true
	case c == '-' || (c >= '0' && c <= '9'):
		return "number", true
	}
	return "", false
}

// typeError reports a value of the wrong kind for the key name at p.pos, or
// a syntax error if no value starts there.
func (p *parser) typeError(name, want string) error {
	k, ok := kindOf(p.data[p.pos])
	if !ok {
		return p.syntaxError("where a value was expected")
	}
	return invalidf("%s must be %s, got %s", name, want, k)
}

// invalidError is the error for a line or a value that is not a valid
// message. It matches ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return "invalid message: " + e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, a ...any) error {
	return &invalidError{fmt.Sprintf(format, a...)}
}

// syntaxError reports the byte at p.pos, or the end of input, as unexpected.
func (p *parser) syntaxError(where string) error {
	if where != "" {
		where = " " + where
	}
	if p.pos >= len(p.data) {
		return invalidf("invalid JSON: unexpected end of input%s", where)
	}
	return invalidf("invalid JSON: unexpected %s%s at column %d", describeByte(p.data[p.pos]), where, p.pos+1)
}

func describeByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// maxQuoted is how much of a bad value an error message shows.
const maxQuoted = 64

// truncate returns b, shortened to maxQuoted bytes with "..." if longer.
func truncate(b []byte) string {
	if len(b) > maxQuoted {
		return string(b[:maxQuoted]) + "..."
	}
	return string(b)
}

// quoteTrunc quotes b as a Go string, shortened to maxQuoted bytes.
func quoteTrunc(b []byte) string {
	if len(b) > maxQuoted {
		return strconv.Quote(string(b[:maxQuoted])) + "..."
	}
	return strconv.Quote(string(b))
}
