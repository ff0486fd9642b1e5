package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/core/runview"
)

// Once a config is loaded, what amelia writes shows its values from
// ${VAR}s as written: in its text, in its errors (which still match what
// they wrap) and in a run's events; the worker's messages go through as
// they are.
func TestMaskerHidesTheConfigsValues(t *testing.T) {
	const secret = "sk-mask-0123456789abcdef"
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte("profiles:\n  dev:\n    model: ${MODEL}\n    sandbox: {provider: local}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(config.Options{Path: file, LookupEnv: func(k string) (string, bool) { return secret, k == "MODEL" }})
	if err != nil {
		t.Fatal(err)
	}
	var m masker
	if got := m.String(secret); got != secret {
		t.Errorf("before a config is loaded: %q", got)
	}
	m.use(c)
	if got := m.String("model " + secret + " not found"); got != "model ${MODEL} not found" {
		t.Errorf("String: %q", got)
	}

	var w bytes.Buffer
	if n, err := fmt.Fprintf(m.Writer(&w), "amelia: %q\n", secret); err != nil || n != len(secret)+11 || w.String() != "amelia: \"${MODEL}\"\n" {
		t.Errorf("Writer: %d, %v, %q", n, err, w.String())
	}

	err = m.Err(fmt.Errorf("run %s: %w", secret, context.Canceled))
	if err.Error() != "run ${MODEL}: context canceled" || !errors.Is(err, context.Canceled) {
		t.Errorf("Err: %q, errors.Is(context.Canceled) = %v", err, errors.Is(err, context.Canceled))
	}

	var out bytes.Buffer
	v := m.View(runview.NewJSON(&out))
	v.PhaseEnd("check", 0, errors.New("no provider named "+secret))
	content := "the model is " + secret
	v.Message(&protocol.AgenticMessage{Type: protocol.Thinking, Content: &content})
	v.Summary(runview.Summary{Err: errors.New("check: " + secret)})
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || strings.Contains(lines[0], secret) || !strings.Contains(lines[1], secret) || strings.Contains(lines[2], secret) {
		t.Errorf("the view shows, for an error, a message and the summary:\n%s", out.String())
	}
}
