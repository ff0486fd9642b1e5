// Package gitcredential reads and writes messages of git's credential
// helper protocol (gitcredentials(7)): lines "key=value", ended by a blank
// line or the end of input. The sandbox's helper (amelia-worker
// git-credential) and the host proxy's /git/credentials route both speak it.
package gitcredential

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/url"
	"strings"
)

// ProxyRoute is the host proxy's credential route, relative to its root URL.
const ProxyRoute = "/git/credentials"

// MaxMessage bounds a message, in bytes.
const MaxMessage = 64 << 10

// Attr is one attribute. Keys may repeat (git sends wwwauth[] several
// times), so a message is a list, in order.
type Attr struct {
	Key, Value string
}

// Message is a credential request or answer.
type Message []Attr

// Get returns the value of the first attribute called key, or "".
func (m Message) Get(key string) string {
	for _, a := range m {
		if a.Key == key {
			return a.Value
		}
	}
	return ""
}

// Bytes renders the message as git writes it: each attribute on its own
// line, no blank line at the end.
func (m Message) Bytes() []byte {
	var b bytes.Buffer
	for _, a := range m {
		b.WriteString(a.Key)
		b.WriteByte('=')
		b.WriteString(a.Value)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Read reads one message from r, up to its blank line or EOF. A line
// without "=" or with an empty key, a NUL byte anywhere or a message longer
// than MaxMessage is an error; a "\r" before a line's "\n" is dropped.
func Read(r io.Reader) (Message, error) {
	sc := bufio.NewScanner(io.LimitReader(r, MaxMessage+1))
	sc.Buffer(make([]byte, 0, 4096), MaxMessage+1)
	var m Message
	size := 0
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" {
			break
		}
		size += len(line) + 1
		if size > MaxMessage {
			return nil, fmt.Errorf("credential message longer than %d bytes", MaxMessage)
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok || key == "" || strings.ContainsAny(line, "\x00\r") {
			return nil, fmt.Errorf("malformed credential line %q: want key=value", truncate(line, 40))
		}
		m = append(m, Attr{key, value})
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return nil, fmt.Errorf("credential message longer than %d bytes", MaxMessage)
		}
		return nil, err
	}
	return m, nil
}

// Target is the protocol and host (with its port, if any) a request is
// for, taken from its protocol and host attributes, or from its url
// attribute when those are missing. The host is lower-cased.
func (m Message) Target() (protocol, host string) {
	protocol, host = m.Get("protocol"), m.Get("host")
	if protocol == "" && host == "" {
		if u, err := url.Parse(m.Get("url")); err == nil {
			protocol, host = u.Scheme, u.Host
		}
	}
	return strings.ToLower(protocol), strings.ToLower(host)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
