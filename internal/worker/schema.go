package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/internal/worker/agent"
)

// moduleRef is the Python worker's form of a schema, module:ClassName: a
// dotted module path and a class name, both made of (ASCII) Python
// identifiers, so that neither can be anything but a name to python3.
var moduleRef = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):([A-Za-z_][A-Za-z0-9_]*)$`)

// schemaScript prints the JSON Schema of the pydantic model argv[2] of the
// module argv[1]. Its exit codes name what went wrong (see pythonSchema);
// the reason is the last line of its stderr.
const schemaScript = `import importlib, json, sys
mod, name = sys.argv[1], sys.argv[2]
try:
    m = importlib.import_module(mod)
except BaseException as e:
    sys.stderr.write("%s: %s\n" % (type(e).__name__, str(e).replace("\n", " ")))
    sys.exit(3)
cls = getattr(m, name, None)
if cls is None:
    sys.exit(4)
if not callable(getattr(cls, "model_json_schema", None)):
    sys.exit(5)
json.dump(cls.model_json_schema(), sys.stdout)
`

// pythonTimeout bounds the python3 that resolves a module:ClassName schema.
const pythonTimeout = time.Minute

// loadSchema reads the schema of a generate call: a JSON Schema file, or
// module:ClassName, the Python worker's form, whose JSON Schema the
// sandbox's python3 gives (ClassName.model_json_schema()). A ref of that
// form is always taken as one, whether or not a file has that name.
func (w *worker) loadSchema(ctx context.Context, ref string) (*agent.Schema, error) {
	if m := moduleRef.FindStringSubmatch(ref); m != nil {
		data, err := w.pythonSchema(ctx, m[1], m[2])
		if err != nil {
			return nil, setupError{fmt.Errorf("schema %s: %w", ref, err)}
		}
		s, err := agent.CompileSchema(m[2], data)
		if err != nil {
			return nil, setupError{err}
		}
		return s, nil
	}
	data, err := os.ReadFile(ref)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && strings.Contains(ref, ":") && !strings.Contains(ref, "/") {
			return nil, setupError{fmt.Errorf("schema %q: no such file, and not module:ClassName either (a dotted module path and a class name, Python identifiers both)", ref)}
		}
		return nil, setupError{fmt.Errorf("read schema: %w", err)}
	}
	s, err := agent.CompileSchema(ref, data)
	if err != nil {
		return nil, setupError{err}
	}
	return s, nil
}

// pythonSchema asks the sandbox's python3 for the JSON Schema of the
// pydantic model class of module. The names are passed as arguments, never
// in the program's text.
func (w *worker) pythonSchema(ctx context.Context, module, class string) ([]byte, error) {
	python, err := exec.LookPath("python3")
	if err != nil {
		return nil, fmt.Errorf("python3 is not on the sandbox's PATH, and it is needed to import module %s (or give a JSON Schema file)", module)
	}
	ctx, cancel := context.WithTimeout(ctx, pythonTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, python, "-c", schemaScript, module, class)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	w.log.Debug("python3 resolved a schema", "module", module, "class", class, "duration", time.Since(start), "err", err)
	if err == nil {
		return stdout.Bytes(), nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("python3 importing module %s: %w", module, context.Cause(ctx))
	}
	why := lastLine(stderr.Bytes())
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case 3:
			return nil, fmt.Errorf("module %s is not importable by the sandbox's python3: %s", module, why)
		case 4:
			return nil, fmt.Errorf("module %s has no %s", module, class)
		case 5:
			return nil, fmt.Errorf("%s.%s is not a pydantic v2 model: it has no model_json_schema()", module, class)
		}
	}
	if why != "" {
		return nil, fmt.Errorf("python3 %s:%s: %v: %s", module, class, err, why)
	}
	return nil, fmt.Errorf("python3 %s:%s: %w", module, class, err)
}

// lastLine is the last non-blank line of b, at most 300 bytes of it.
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	s := strings.TrimSpace(lines[len(lines)-1])
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
