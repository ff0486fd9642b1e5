package config

import (
	"fmt"
	"strings"
)

// expansion is the result of interpolating one string value.
type expansion struct {
	value   string
	unset   []string // variables referenced without a default and not set
	changed bool     // the value contained at least one reference
}

// expand replaces ${VAR} and ${VAR:-default} in s using lookup.
//
//   - ${VAR} is the variable's value; if VAR is unset it is reported in
//     unset (an empty but set variable is fine).
//   - ${VAR:-default} is the variable's value, or default when VAR is unset
//     or empty; the default may itself contain references.
//   - $${ is a literal "${"; any other "$" is left alone.
//
// A "${" that does not start a well-formed reference is an error, and so
// is a value that expands to more than maxConfigBytes.
func expand(s string, lookup func(string) (string, bool)) (expansion, error) {
	var out expansion
	if !strings.Contains(s, "$") {
		out.value = s
		return out, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		c := s[i]
		if c != '$' {
			b.WriteByte(c)
			i++
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
			out.changed = true
		case strings.HasPrefix(s[i:], "${"):
			end := matchBrace(s, i+2)
			if end < 0 {
				return out, fmt.Errorf("unterminated reference %q (want ${NAME} or ${NAME:-default})", s[i:])
			}
			ref := s[i+2 : end]
			name, def, hasDef := strings.Cut(ref, ":-")
			if !validEnvName(name) {
				return out, fmt.Errorf("invalid reference %q (want ${NAME} or ${NAME:-default}; write $${ for a literal ${)", s[i:end+1])
			}
			out.changed = true
			v, ok := lookup(name)
			switch {
			case hasDef && (!ok || v == ""):
				sub, err := expand(def, lookup)
				if err != nil {
					return out, err
				}
				out.unset = append(out.unset, sub.unset...)
				b.WriteString(sub.value)
			case !ok:
				out.unset = append(out.unset, name)
			default:
				b.WriteString(v)
			}
			if b.Len() > maxConfigBytes {
				return out, fmt.Errorf("${%s} makes the value longer than %s, the limit of config text", name, formatSize(maxConfigBytes))
			}
			i = end + 1
		default:
			b.WriteByte(c)
			i++
		}
	}
	out.value = b.String()
	return out, nil
}

// matchBrace returns the index of the "}" that closes a reference whose
// body starts at from, allowing nested ${...} in defaults; -1 if none.
func matchBrace(s string, from int) int {
	depth := 0
	for i := from; i < len(s); i++ {
		switch {
		case strings.HasPrefix(s[i:], "${"):
			depth++
			i++
		case s[i] == '}':
			if depth == 0 {
				return i
			}
			depth--
		}
	}
	return -1
}
