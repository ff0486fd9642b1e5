package proxy

import (
	"bytes"
	"encoding/json"
	"io"
)

// usage is the token usage an upstream reported; nil fields were not
// reported.
type usage struct {
	input, output, cacheRead, cacheCreation *int64
	cost                                    *float64
}

// usageFields covers OpenAI's chat completions (prompt_tokens...), its
// Responses API and Anthropic's messages (input_tokens...), and
// OpenRouter's cost.
type usageFields struct {
	PromptTokens             *int64        `json:"prompt_tokens"`
	CompletionTokens         *int64        `json:"completion_tokens"`
	InputTokens              *int64        `json:"input_tokens"`
	OutputTokens             *int64        `json:"output_tokens"`
	CacheReadInputTokens     *int64        `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int64        `json:"cache_creation_input_tokens"`
	PromptTokensDetails      *tokenDetails `json:"prompt_tokens_details"`
	InputTokensDetails       *tokenDetails `json:"input_tokens_details"`
	Cost                     *float64      `json:"cost"`
}

type tokenDetails struct {
	CachedTokens     *int64 `json:"cached_tokens"`
	CacheWriteTokens *int64 `json:"cache_write_tokens"`
}

// usageEnvelope finds usage where the APIs put it: at the top (chat
// completions, Anthropic's message_delta), in "message" (Anthropic's
// message_start) or in "response" (the Responses API's events), or in
// Gemini's "usageMetadata".
type usageEnvelope struct {
	Usage         *usageFields                  `json:"usage"`
	Message       *struct{ Usage *usageFields } `json:"message"`
	Response      *struct{ Usage *usageFields } `json:"response"`
	UsageMetadata *geminiUsage                  `json:"usageMetadata"`
}

// geminiUsage is Gemini's usageMetadata. promptTokenCount includes the
// cached tokens, as OpenAI's prompt_tokens does; the thinking tokens
// (thoughtsTokenCount) are billed as output but not counted in
// candidatesTokenCount, so output is the sum of the two.
type geminiUsage struct {
	PromptTokenCount        *int64 `json:"promptTokenCount"`
	CandidatesTokenCount    *int64 `json:"candidatesTokenCount"`
	ThoughtsTokenCount      *int64 `json:"thoughtsTokenCount"`
	CachedContentTokenCount *int64 `json:"cachedContentTokenCount"`
}

// merge takes the counts of one JSON document, or of each document of a
// JSON array (Gemini's streamGenerateContent without alt=sse); later
// reports override earlier ones (streamed counts are cumulative).
func (u *usage) merge(doc []byte) {
	if doc = bytes.TrimSpace(doc); len(doc) > 0 && doc[0] == '[' {
		var docs []json.RawMessage
		if json.Unmarshal(doc, &docs) == nil {
			for _, d := range docs {
				u.merge(d)
			}
		}
		return
	}
	var env usageEnvelope
	if json.Unmarshal(doc, &env) != nil {
		return
	}
	if g := env.UsageMetadata; g != nil {
		set(&u.input, g.PromptTokenCount)
		set(&u.cacheRead, g.CachedContentTokenCount)
		if g.CandidatesTokenCount != nil || g.ThoughtsTokenCount != nil {
			out := deref(g.CandidatesTokenCount) + deref(g.ThoughtsTokenCount)
			u.output = &out
		}
	}
	for _, f := range []*usageFields{env.Usage, msgUsage(env.Message), msgUsage(env.Response)} {
		if f == nil {
			continue
		}
		set(&u.input, f.PromptTokens, f.InputTokens)
		set(&u.output, f.CompletionTokens, f.OutputTokens)
		set(&u.cacheRead, f.CacheReadInputTokens, details(f.PromptTokensDetails, false), details(f.InputTokensDetails, false))
		set(&u.cacheCreation, f.CacheCreationInputTokens, details(f.PromptTokensDetails, true))
		if f.Cost != nil {
			u.cost = f.Cost
		}
	}
}

func msgUsage(m *struct{ Usage *usageFields }) *usageFields {
	if m == nil {
		return nil
	}
	return m.Usage
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func details(d *tokenDetails, write bool) *int64 {
	switch {
	case d == nil:
		return nil
	case write:
		return d.CacheWriteTokens
	}
	return d.CachedTokens
}

func set(dst **int64, vals ...*int64) {
	for _, v := range vals {
		if v != nil {
			*dst = v
			return
		}
	}
}

// A sniffer reads usage out of a response body as it streams through.
type sniffer interface {
	write(p []byte)
	result() *usage
}

// sniffingBody passes the body through unchanged, showing it to a sniffer.
type sniffingBody struct {
	io.ReadCloser
	s sniffer
}

func (b *sniffingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.s.write(p[:n])
	}
	return n, err
}

// maxSniff bounds what is kept of a JSON body or an SSE line; usage in
// anything bigger goes unread.
const maxSniff = 4 << 20

// jsonSniffer keeps a JSON body and reads its usage at the end.
type jsonSniffer struct {
	buf  []byte
	over bool
}

func (s *jsonSniffer) write(p []byte) {
	if s.over {
		return
	}
	if len(s.buf)+len(p) > maxSniff {
		s.over, s.buf = true, nil
		return
	}
	s.buf = append(s.buf, p...)
}

func (s *jsonSniffer) result() *usage {
	var u usage
	if !s.over {
		u.merge(s.buf)
	}
	return &u
}

// sseSniffer reads the data lines of a server-sent event stream that
// mention usage.
type sseSniffer struct {
	line []byte
	skip bool // the current line is too long to keep
	u    usage
}

// usageKey and usageMetadataKey mark the lines worth decoding.
var (
	usageKey         = []byte(`"usage"`)
	usageMetadataKey = []byte(`"usageMetadata"`)
)

func (s *sseSniffer) write(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.add(p)
			return
		}
		s.add(p[:i])
		s.endLine()
		p = p[i+1:]
	}
}

func (s *sseSniffer) add(p []byte) {
	if s.skip {
		return
	}
	if len(s.line)+len(p) > maxSniff {
		s.skip, s.line = true, s.line[:0]
		return
	}
	s.line = append(s.line, p...)
}

func (s *sseSniffer) endLine() {
	line := bytes.TrimSuffix(s.line, []byte("\r"))
	if data, ok := bytes.CutPrefix(line, []byte("data:")); ok && !s.skip && (bytes.Contains(data, usageKey) || bytes.Contains(data, usageMetadataKey)) {
		s.u.merge(bytes.TrimSpace(data))
	}
	s.line, s.skip = s.line[:0], false
}

func (s *sseSniffer) result() *usage {
	if len(s.line) > 0 {
		s.endLine()
	}
	return &s.u
}
