package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	kyaml "github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/v2"
	"go.yaml.in/yaml/v3"
)

// keyDelim is koanf's key-path delimiter. Keys are user data (provider
// settings such as labels: {"com.example.team": x} contain dots), so it is
// the ASCII unit separator, which cannot appear in a YAML key unless
// written as an escape, nor in an environment variable's name in practice.
const keyDelim = "\x1f"

// Environment variables that are configuration keys. Every other AMELIA_*
// variable (AMELIA_CONFIG, AMELIA_PLUGIN_PATH, ...) is not.
const (
	envPrefix         = "AMELIA_"
	envDefaultProfile = "AMELIA_DEFAULT_PROFILE"
	envProfilesPrefix = "AMELIA_PROFILES__"
	envNestSep        = "__"
)

// maxConfigBytes bounds config text: the file, the environment overrides
// together, and what ${VAR}s expand to in all. The largest real configs
// are tens of KiB (configs/example.yaml, every key documented, is 12 KiB),
// so 1 MiB leaves room for thousands of profiles and still validates in
// about a second at worst (4,400 dense profiles), while a wrong --config
// (a log, a disk image, a pipe that never ends) fails at once instead of
// being parsed into a tree many times its size.
const maxConfigBytes = 1 << 20

// maxConfigDepth bounds how deep maps and lists nest in config text, the
// file's and the overrides' keys. The deepest key Amelia knows is 7
// levels down (profiles.NAME.sandbox.docker.registry.auth.username), and
// providers' settings are a few more; the YAML parser allows 10,000, and
// a file nested thousands of levels deep, a few KiB, takes seconds to
// turn into keys.
const maxConfigDepth = 100

// builtinConfig is used when there is no --config, no AMELIA_CONFIG and no
// file at the default path.
const builtinConfig = `
default_profile: local
profiles:
  local:
    model: ` + DefaultModel + `
    llm:
      base_url: ` + DefaultBaseURL + `
      api_key_env: ` + DefaultAPIKeyEnv + `
    sandbox:
      provider: local
      network: open
`

// Load finds, reads and validates the configuration. Problems in the
// configuration are returned as a *ValidationError listing all of them;
// a missing explicitly named file, an unreadable file or malformed YAML is
// a plain error naming the file.
//
// The file is Options.Path, else $AMELIA_CONFIG, else
// $XDG_CONFIG_HOME/amelia/config.yaml or ~/.config/amelia/config.yaml; if
// that default file does not exist the built-in default is used (a single
// profile "local"). Environment overrides are applied on top:
// AMELIA_DEFAULT_PROFILE and AMELIA_PROFILES__<NAME>__<KEY>[__<SUBKEY>...]
// (lowercased; matched case-insensitively to keys already in the file; an
// empty value unsets the key; lists are comma-separated).
func Load(opts Options) (*Config, error) {
	lookup := opts.lookup()
	name, origin, err := configPath(opts, lookup)
	if err != nil {
		return nil, err
	}
	if name != "" {
		name = filepath.Clean(name)
	}

	k := koanf.NewWithConf(koanf.Conf{Delim: keyDelim})
	source := ""
	if name != "" {
		b, err := readConfig(name)
		if err == nil {
			err = k.Load(bytesProvider(b), yamlParser{})
		}
		var perr *parseError
		switch {
		case err == nil:
			source = name
		case errors.As(err, &perr):
			return nil, fmt.Errorf("%s: %s", name, perr.msg)
		case origin == "" && errors.Is(err, fs.ErrNotExist):
			// The default file is optional.
		case origin == "":
			return nil, fmt.Errorf("read config: %w", err)
		default:
			return nil, fmt.Errorf("read config named by %s: %w", origin, err)
		}
	}
	if source == "" {
		if err := k.Load(bytesProvider(builtinConfig), yamlParser{}); err != nil {
			return nil, fmt.Errorf("built-in default config: %w", err)
		}
	}

	if n := overridesSize(opts.Environ); n > maxConfigBytes {
		return nil, fmt.Errorf("environment overrides: the %s and %s* variables hold %d bytes, over the limit of %s for config text",
			envDefaultProfile, envProfilesPrefix, n, formatSize(maxConfigBytes))
	}
	envKeys := map[string]string{} // lowercased key path → variable that set it
	ov := overrides{profiles: fileProfiles(k.Raw()), seen: envKeys}
	ep := env.Provider(keyDelim, env.Opt{
		Prefix:        envPrefix,
		EnvironFunc:   func() []string { return opts.Environ },
		TransformFunc: ov.transform,
	})
	if err := k.Load(ep, nil, koanf.WithMergeFunc(mergeFold)); err != nil {
		return nil, fmt.Errorf("environment overrides: %w", err)
	}

	d := &decoder{lookup: lookup, home: opts.HomeDir, envKeys: envKeys}
	var r root
	decodeSection(d, nil, k.Raw(), rootSection(), &r)
	hide := newHiding(d.hidden)
	d.problems = append(ov.problems(), d.problems...)
	for _, p := range r.profiles {
		p.source = source
		if source == "" {
			p.absent = name
		}
		p.lookupEnv = lookup
		p.envKeys = envKeys
		p.hide = hide
	}
	c := &Config{Source: source, DefaultProfile: r.defaultProfile, Profiles: r.profiles, hide: hide}
	if len(d.problems) > 0 {
		// The problems quote hidden values as written already; this
		// keeps it so for any message that forgot to.
		for i := range d.problems {
			d.problems[i].Message = hide.redact(d.problems[i].Message)
		}
		return nil, &ValidationError{File: source, Problems: d.problems, partial: c}
	}
	return c, nil
}

// readConfig reads the config file name, refusing one over maxConfigBytes
// before reading it: a regular file by its size, anything else (a pipe, a
// device) by reading one byte more than the limit at most.
func readConfig(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > maxConfigBytes {
		return nil, fmt.Errorf("%s is %d bytes, over the limit of %s for a config file (is it the right file?)", name, fi.Size(), formatSize(maxConfigBytes))
	}
	b, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	switch {
	case err != nil:
		return nil, err
	case len(b) > maxConfigBytes:
		return nil, fmt.Errorf("%s holds more than %d bytes, over the limit of %s for a config file (is it the right file?)", name, maxConfigBytes, formatSize(maxConfigBytes))
	}
	return b, nil
}

// overridesSize is the size of the environment overrides in environ, as
// NAME=value.
func overridesSize(environ []string) int {
	n := 0
	for _, kv := range environ {
		if strings.HasPrefix(kv, envDefaultProfile+"=") || strings.HasPrefix(kv, envProfilesPrefix) {
			n += len(kv)
		}
	}
	return n
}

// lookup returns the environment lookup function: LookupEnv, else a
// lookup in Environ.
func (o Options) lookup() func(string) (string, bool) {
	if o.LookupEnv != nil {
		return o.LookupEnv
	}
	environ := o.Environ
	return func(name string) (string, bool) {
		for i := len(environ) - 1; i >= 0; i-- {
			if k, v, ok := strings.Cut(environ[i], "="); ok && k == name {
				return v, true
			}
		}
		return "", false
	}
}

// Path is the config file Load reads: Options.Path, else $AMELIA_CONFIG,
// else the default path ($XDG_CONFIG_HOME/amelia/config.yaml or
// ~/.config/amelia/config.yaml), whether or not it exists.
func Path(opts Options) (string, error) {
	name, _, err := configPath(opts, opts.lookup())
	if err == nil && name == "" {
		err = errors.New("no config file: no --config, no AMELIA_CONFIG, and no home directory for the default path")
	}
	return name, err
}

// configPath returns the file to load and what named it ("--config" or
// "AMELIA_CONFIG"; "" for the default path, which may be missing). An
// empty name means there is no default path (no home directory).
func configPath(opts Options, lookup func(string) (string, bool)) (name, origin string, err error) {
	switch v, _ := lookup("AMELIA_CONFIG"); {
	case opts.Path != "":
		name, origin = opts.Path, "--config"
	case v != "":
		name, origin = v, "AMELIA_CONFIG"
	default:
		if xdg, _ := lookup("XDG_CONFIG_HOME"); filepath.IsAbs(xdg) {
			return filepath.Join(xdg, "amelia", "config.yaml"), "", nil
		}
		if opts.HomeDir == "" {
			return "", "", nil
		}
		return filepath.Join(opts.HomeDir, ".config", "amelia", "config.yaml"), "", nil
	}
	if name == "~" || strings.HasPrefix(name, "~/") {
		if opts.HomeDir == "" {
			return "", "", fmt.Errorf("config file %s (from %s): no home directory to expand ~", name, origin)
		}
		name = filepath.Join(opts.HomeDir, name[1:])
	}
	return name, origin, nil
}

// fileProfiles are the names of the profiles in the config file (or the
// built-in default) before the environment overrides, lowercased as the
// overrides' names are; nil when "profiles" is there but not a map, which
// is a problem of its own.
func fileProfiles(tree map[string]any) map[string]bool {
	names := map[string]bool{}
	switch m := tree["profiles"].(type) {
	case nil:
	case map[string]any:
		for name := range m {
			names[strings.ToLower(name)] = true
		}
	default:
		return nil
	}
	return names
}

// overrides turns the environment into config keys: AMELIA_DEFAULT_PROFILE
// and AMELIA_PROFILES__A__B=v. An override is of a profile the config
// has: one for any other profile (a typo of its name, a variable left
// from another config) is left out and reported, naming the variable,
// rather than making a profile of what the variables say.
type overrides struct {
	// profiles are the config's profiles, lowercased; nil: any profile.
	profiles map[string]bool
	// seen records which variable set which key (lowercased key path).
	seen map[string]string
	// stray are the variables left out, by the profile they name.
	stray map[string][]string
	// deep are the variables left out whose keys nest deeper than
	// maxConfigDepth.
	deep []string
}

// transform maps one variable to a koanf key; every other variable is
// dropped. An empty value becomes nil, which unsets the key.
func (o *overrides) transform(k, v string) (string, any) {
	var parts []string
	switch {
	case k == envDefaultProfile:
		parts = []string{"default_profile"}
	case strings.HasPrefix(k, envProfilesPrefix):
		parts = append([]string{"profiles"}, strings.Split(strings.ToLower(k[len(envProfilesPrefix):]), envNestSep)...)
		for _, p := range parts {
			if p == "" {
				return "", nil
			}
		}
		if len(parts) > maxConfigDepth {
			o.deep = append(o.deep, k)
			return "", nil
		}
		if o.profiles != nil && !o.profiles[parts[1]] {
			if v != "" { // unsetting a key of no profile changes nothing
				if o.stray == nil {
					o.stray = map[string][]string{}
				}
				o.stray[parts[1]] = append(o.stray[parts[1]], k)
			}
			return "", nil
		}
	default:
		return "", nil
	}
	key := strings.Join(parts, keyDelim)
	o.seen[key] = k
	if v == "" {
		return key, nil
	}
	return key, v
}

// problems are the overrides of profiles the config does not have, one
// per profile, naming the variables, and those nested too deep.
func (o *overrides) problems() []Problem {
	var out []Problem
	slices.Sort(o.deep)
	for _, name := range o.deep {
		if len(name) > 60 {
			name = name[:60] + "..."
		}
		out = append(out, Problem{Message: fmt.Sprintf("environment variable %s: its keys are nested more than %d levels deep, over the limit for config keys", name, maxConfigDepth)})
	}
	have := sortedKeys(o.profiles)
	for _, name := range sortedKeys(o.stray) {
		vars := o.stray[name]
		slices.Sort(vars)
		what := "environment variable "
		if len(vars) > 1 {
			what = "environment variables "
		}
		seg, _, _ := strings.Cut(vars[0][len(envProfilesPrefix):], envNestSep)
		in := "the config has none"
		if len(have) > 0 {
			in = "profiles: " + strings.Join(have, ", ")
		}
		out = append(out, Problem{Message: fmt.Sprintf("%s%s: no profile %q (%s); set %s%s__... only for a profile the config has, or add profile %s to the config",
			what, strings.Join(vars, ", "), name, in, envProfilesPrefix, seg, name)})
	}
	return out
}

// mergeFold merges src into dest like koanf's default merge, except that a
// key matches an existing key that differs only in case (environment
// variable names are upper case; the file's keys may be camelCase).
func mergeFold(src, dest map[string]any) error {
	for k, v := range src {
		dk := k
		if _, ok := dest[k]; !ok {
			var match []string
			for existing := range dest {
				if strings.EqualFold(existing, k) {
					match = append(match, existing)
				}
			}
			if len(match) == 1 {
				dk = match[0]
			}
		}
		sm, sIsMap := v.(map[string]any)
		dm, dIsMap := dest[dk].(map[string]any)
		if sIsMap && dIsMap {
			if err := mergeFold(sm, dm); err != nil {
				return err
			}
			continue
		}
		dest[dk] = v
	}
	return nil
}

// parseError is a YAML syntax or structure error, already carrying the
// line.
type parseError struct{ msg string }

func (e *parseError) Error() string { return e.msg }

// yamlParser is koanf's YAML parser, with errors that give the line and a
// clear message when the document is not a map.
type yamlParser struct{}

func (yamlParser) Unmarshal(b []byte) (map[string]any, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		if strings.Contains(err.Error(), "exceeded max depth") {
			return nil, &parseError{msg: tooDeep}
		}
		return nil, yamlError(locateMistake(b, err))
	}
	if len(doc.Content) == 0 {
		return map[string]any{}, nil // empty or only comments
	}
	if top := doc.Content[0]; top.Kind != yaml.MappingNode {
		return nil, &parseError{msg: fmt.Sprintf("invalid config: line %d: the top level must be a map (default_profile, profiles), got %s", top.Line, nodeKind(top))}
	}
	// Before the document becomes maps and keys, which takes seconds for
	// one nested thousands of levels deep.
	if line := nestedTooDeep(doc.Content[0], 1, map[*yaml.Node]int{}); line != 0 {
		return nil, &parseError{msg: fmt.Sprintf("line %d: %s", line, tooDeep)}
	}
	m, err := kyaml.Parser().Unmarshal(b)
	if err != nil {
		return nil, yamlError(err)
	}
	return m, nil
}

// tooDeep says that config text nests deeper than maxConfigDepth.
var tooDeep = fmt.Sprintf("maps and lists nested more than %d levels deep, over the limit for a config file (is it the right file?)", maxConfigDepth)

// nestedTooDeep returns the line of the first map or list under n, n at
// nesting level, that is deeper than maxConfigDepth, or 0 if there is
// none. An alias is as deep as what it stands for: height holds the
// heights of anchored nodes, -1 while one is measured.
func nestedTooDeep(n *yaml.Node, level int, height map[*yaml.Node]int) int {
	switch n.Kind {
	case yaml.AliasNode:
		if level+aliasHeight(n.Alias, height) > maxConfigDepth+1 {
			return n.Line
		}
	case yaml.MappingNode, yaml.SequenceNode:
		if level > maxConfigDepth {
			return n.Line
		}
		for _, c := range n.Content {
			if line := nestedTooDeep(c, level+1, height); line != 0 {
				return line
			}
		}
	}
	return 0
}

// aliasHeight is how many levels of maps and lists n is, counting n
// itself; more than maxConfigDepth for one that holds itself.
func aliasHeight(n *yaml.Node, height map[*yaml.Node]int) int {
	switch h, ok := height[n]; {
	case ok && h < 0:
		return maxConfigDepth + 1
	case ok:
		return h
	}
	height[n] = -1
	h := 0
	switch n.Kind {
	case yaml.AliasNode:
		h = aliasHeight(n.Alias, height)
	case yaml.MappingNode, yaml.SequenceNode:
		for _, c := range n.Content {
			h = max(h, aliasHeight(c, height))
			if h > maxConfigDepth {
				break
			}
		}
		h++
	}
	height[n] = h
	return h
}

// yamlError turns a YAML error into one line starting with the line number.
func yamlError(err error) *parseError {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msg = strings.Join(te.Errors, "; ")
	}
	return &parseError{msg: "invalid YAML: " + oneLine(strings.TrimPrefix(msg, "yaml: "))}
}

func (yamlParser) Marshal(m map[string]any) ([]byte, error) { return kyaml.Parser().Marshal(m) }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return "a scalar"
	case yaml.AliasNode:
		return "an alias"
	}
	return "something else"
}

// bytesProvider is a koanf provider for a document in memory.
type bytesProvider []byte

func (b bytesProvider) ReadBytes() ([]byte, error) { return b, nil }
func (b bytesProvider) Read() (map[string]any, error) {
	return nil, errors.New("bytesProvider: use ReadBytes")
}
