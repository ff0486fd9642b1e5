package llmwire

import (
	"bytes"
	"fmt"
)

// sseParser splits a server-sent event stream into events as its bytes
// arrive, in pieces of any size. Lines end with "\n" or "\r\n"; an event
// ends with an empty line (or the end of the stream). A line or an event
// longer than max is dropped, and err says so.
type sseParser struct {
	max     int
	onEvent func(name string, data []byte)

	line    []byte
	skip    bool // the current line is over max
	name    string
	data    []byte
	hasData bool
	broken  bool // the current event lost a line
	err     error
}

func (p *sseParser) write(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.add(b)
			return
		}
		p.add(b[:i])
		p.endLine()
		b = b[i+1:]
	}
}

func (p *sseParser) add(b []byte) {
	if p.skip {
		return
	}
	if len(p.line)+len(b) > p.max {
		p.skip, p.line = true, p.line[:0]
		return
	}
	p.line = append(p.line, b...)
}

func (p *sseParser) endLine() {
	line := bytes.TrimSuffix(p.line, []byte("\r"))
	defer func() { p.line, p.skip = p.line[:0], false }()
	switch {
	case p.skip:
		p.drop()
		return
	case len(line) == 0:
		p.dispatch()
		return
	case line[0] == ':': // a comment
		return
	}
	field, value, _ := bytes.Cut(line, []byte(":"))
	value = bytes.TrimPrefix(value, []byte(" "))
	switch string(field) {
	case "event":
		p.name = string(value)
	case "data":
		if len(p.data)+len(value)+1 > p.max {
			p.drop()
			return
		}
		if p.hasData {
			p.data = append(p.data, '\n')
		}
		p.data, p.hasData = append(p.data, value...), true
	}
}

func (p *sseParser) drop() {
	p.broken = true
	p.data = p.data[:0]
	if p.err == nil {
		p.err = fmt.Errorf("a server-sent event over %d bytes was dropped", p.max)
	}
}

func (p *sseParser) dispatch() {
	if p.hasData && !p.broken {
		p.onEvent(p.name, p.data)
	}
	p.name, p.data, p.hasData, p.broken = "", p.data[:0], false, false
}

// finish ends the stream: a last line or event without its end counts.
func (p *sseParser) finish() {
	if len(p.line) > 0 || p.skip {
		p.endLine()
	}
	p.dispatch()
}
