package config

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// masked replaces secret values in ShowYAML's output.
const masked = "********"

// ShowYAML renders the resolved profile as YAML for people: a comment
// naming the profile and its source, then the keys in schema order (model;
// llm with its timeout and, if present, its anthropic and gemini blocks;
// git unless it is all defaults; proxy; sandbox: provider, network, allowed_hosts, then
// the provider settings blocks sorted by name, their keys sorted). Secrets
// are masked by key name at any depth (see isSecretKey), passwords in URLs
// too, and every api_key_env and git.token_env carries a comment saying
// whether the variable is set, never its value. A value that came from a
// ${VAR} or an override is shown as written (see Redact), never expanded.
func (p *Profile) ShowYAML() ([]byte, error) {
	s := &shower{lookup: p.lookupEnv, hide: p.hide}
	top := showSection(s, path{}.key("profiles").key(p.Name), profileSection(), p)
	src := p.source
	if src == "" {
		src = "built-in default"
	}
	if len(top.Content) > 0 {
		top.Content[0].HeadComment = oneLine(fmt.Sprintf("profile %s from %s", p.Name, src))
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(top); err != nil {
		return nil, fmt.Errorf("show profile %s: %w", p.Name, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("show profile %s: %w", p.Name, err)
	}
	return b.Bytes(), nil
}

// shower builds the YAML nodes of ShowYAML.
type shower struct {
	lookup func(string) (string, bool) // nil: say nothing about variables
	hide   *hiding                     // nil: nothing is hidden
}

// showSection renders a section's fields in schema order, then its extras.
func showSection[T any](s *shower, at path, sec section[T], src *T) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for _, f := range sec.fields {
		if f.show == nil {
			continue
		}
		if v := f.show(s, at.key(f.key), src); v != nil {
			m.Content = append(m.Content, strNode(f.key), s.value(at.key(f.key), f.key, v))
		}
	}
	if sec.showExtra != nil {
		for _, kv := range sec.showExtra(s, at, src) {
			m.Content = append(m.Content, strNode(kv.key), s.value(at.key(kv.key), kv.key, kv.val))
		}
	}
	return m
}

// value renders the value stored under key, at a path, masking it if the
// key names a secret, and showing it as written if it is hidden (came
// from a ${VAR} or an override).
func (s *shower) value(at path, key string, v any) *yaml.Node {
	if isSecretKey(key) && !isEmptyValue(v) {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: masked, Style: yaml.DoubleQuotedStyle}
	}
	if h, ok := s.hide.value(at); ok {
		n := strNode(redactURL(h.written()))
		if c, ok := v.(*yaml.Node); ok {
			n.LineComment = c.LineComment // what it says of the value's variable, or of its default
		}
		return n
	}
	switch t := v.(type) {
	case *yaml.Node:
		return t
	case string:
		return strNode(redactURL(t))
	case []string:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i, it := range t {
			n.Content = append(n.Content, s.value(at.index(i), "", it))
		}
		return n
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i, it := range t {
			// Items of a list inherit nothing: the list's own key was
			// checked above.
			n.Content = append(n.Content, s.value(at.index(i), "", it))
		}
		return n
	case map[string]any:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for _, k := range sortedKeys(t) {
			n.Content = append(n.Content, strNode(k), s.value(at.key(k), k, t[k]))
		}
		return n
	}
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		return strNode(fmt.Sprint(v))
	}
	return &n
}

// envNameNode shows an environment variable's name with a comment saying
// whether it is set.
func (s *shower) envNameNode(name string) *yaml.Node {
	n := strNode(name)
	if s.lookup != nil {
		switch v, ok := s.lookup(name); {
		case !ok:
			n.LineComment = "not set"
		case v == "":
			n.LineComment = "set but empty"
		default:
			n.LineComment = "set"
		}
	}
	return n
}

// formatDuration writes d as a person would: 10m, 1h, 1h30m, 90s → 1m30s
// (time.Duration.String without the trailing zero units).
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func strNode(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

func isEmptyValue(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case string:
		return t == ""
	}
	return false
}

// redactURL masks the password of a URL with credentials
// (scheme://user:password@host/...); other strings are returned as is. It
// works on the text, so that a URL that does not parse is masked too.
func redactURL(s string) string {
	i := strings.Index(s, "://")
	if i < 0 {
		return s
	}
	rest := s[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return s
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	if !hasPassword {
		return s
	}
	return s[:i+3] + user + ":" + masked + rest[at:]
}
