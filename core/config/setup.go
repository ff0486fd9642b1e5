package config

import (
	"maps"
	"slices"
	"strings"
)

// maxSetupCommands bounds sandbox.setup's map of commands.
const maxSetupCommands = 64

// setup reads sandbox.setup the way the Development Containers
// specification reads postCreateCommand: a string is one command run by
// sh -c, a list of strings is one command's argv (no shell), and a map
// names several of those, which run one after another in the order of
// their names (the specification runs them in parallel; a sandbox's setup
// must come out the same every time).
func (d *decoder) setup(at path, v any) []SetupCommand {
	one := func(at path, name string, v any) (SetupCommand, bool) {
		switch t := v.(type) {
		case string:
			s, ok := d.str(at, t)
			if !ok {
				return SetupCommand{}, false
			}
			if strings.TrimSpace(s.val) == "" || strings.ContainsRune(s.val, 0) {
				d.problemf(at, "is an empty command (or holds a NUL byte): write a command, such as npm ci")
				return SetupCommand{}, false
			}
			return SetupCommand{Name: name, Argv: []string{"sh", "-c", s.val}}, true
		case []any:
			argv, ok := d.strList(at, t, func(at path, s sval) (string, bool) {
				if strings.ContainsRune(s.val, 0) {
					d.problemf(at, "holds a NUL byte")
					return "", false
				}
				return s.val, true
			})
			if !ok {
				return SetupCommand{}, false
			}
			if len(argv) == 0 || argv[0] == "" {
				d.problemf(at, "is an empty command: an argv list starts with the program, such as [npm, ci]")
				return SetupCommand{}, false
			}
			return SetupCommand{Name: name, Argv: argv}, true
		}
		d.problemf(at, "must be a command: a string (run by sh -c), a list of strings (an argv), or a map of those, got %s", typeName(v))
		return SetupCommand{}, false
	}
	m, ok := v.(map[string]any)
	if !ok {
		c, ok := one(at, "", v)
		if !ok {
			return nil
		}
		return []SetupCommand{c}
	}
	if len(m) > maxSetupCommands {
		d.problemf(at, "holds %d commands; at most %d", len(m), maxSetupCommands)
		return nil
	}
	var out []SetupCommand
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if name == "" || strings.ContainsAny(name, "\x00\n") {
			d.problemf(at, "%q is not a command's name", name)
			continue
		}
		if c, ok := one(at.key(name), name, m[name]); ok {
			out = append(out, c)
		}
	}
	return out
}

// showSetup is sandbox.setup as `amelia config show` prints it: in the
// form it was written in.
func showSetup(cmds []SetupCommand) any {
	if len(cmds) == 0 {
		return nil
	}
	form := func(c SetupCommand) any {
		if len(c.Argv) == 3 && c.Argv[0] == "sh" && c.Argv[1] == "-c" {
			return c.Argv[2]
		}
		return slices.Clone(c.Argv)
	}
	if len(cmds) == 1 && cmds[0].Name == "" {
		return form(cmds[0])
	}
	out := map[string]any{}
	for _, c := range cmds {
		out[c.Name] = form(c)
	}
	return out
}
