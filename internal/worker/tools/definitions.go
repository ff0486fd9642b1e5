package tools

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// schema is the subset of JSON Schema the tools' parameters use.
type schema struct {
	Type                 string             `json:"type"`
	Description          string             `json:"description,omitempty"`
	Enum                 []string           `json:"enum,omitempty"`
	Minimum              *float64           `json:"minimum,omitempty"`
	ExclusiveMinimum     *float64           `json:"exclusiveMinimum,omitempty"`
	Default              any                `json:"default,omitempty"`
	Items                *schema            `json:"items,omitempty"`
	Properties           map[string]*schema `json:"properties,omitempty"`
	Required             []string           `json:"required,omitzero"`
	AdditionalProperties *bool              `json:"additionalProperties,omitempty"`
}

func object(props map[string]*schema, required ...string) *schema {
	no := false
	if required == nil {
		required = []string{}
	}
	return &schema{Type: "object", Properties: props, Required: required, AdditionalProperties: &no}
}

func str(desc string) *schema { return &schema{Type: "string", Description: desc} }

func num(typ, desc string, minimum float64, def any) *schema {
	return &schema{Type: typ, Description: desc, Minimum: &minimum, Default: def}
}

const pathNote = "Relative to the working directory; an absolute path must be inside it."

// toolSpec is a tool before its schema is encoded.
type toolSpec struct {
	name, description string
	params            *schema
	run               runner
}

// specs lists the tools in the order Definitions gives them.
func (s *Set) specs() []toolSpec {
	timeout := strconv.FormatFloat(s.defaultTimeout.Seconds(), 'f', -1, 64)
	maxTimeout := strconv.FormatFloat(s.maxTimeout.Seconds(), 'f', -1, 64)
	zero := 0.0
	return []toolSpec{{
		name: "ls",
		description: "List the entries of a directory, one per line, sorted by name; directories end with \"/\". " +
			"Entries are shown as paths relative to the working directory, so they can be passed to the other tools. " +
			"Not recursive: use glob to find files deeper down.",
		params: object(map[string]*schema{
			"path": str("Directory to list (default \".\", the working directory). " + pathNote),
		}),
		run: s.ls,
	}, {
		name: "read_file",
		description: "Read a text file. Lines come numbered like cat -n (line number, a tab, the line), starting at line offset+1, " +
			"at most limit lines (default 2000); lines longer than 2000 characters are cut. " +
			"Read a file before editing it. For a long file, read it in parts with offset and limit; " +
			"the output says which offset to continue from.",
		params: object(map[string]*schema{
			"file_path": str("Path of the file to read. " + pathNote),
			"offset":    num("integer", "0-based number of the first line to read (default 0, the start of the file).", 0, 0),
			"limit":     num("integer", "Maximum number of lines to read (default 2000).", 1, defaultReadLimit),
		}, "file_path"),
		run: s.readFile,
	}, {
		name: "write_file",
		description: "Create a file with the given content, or replace the whole content of an existing file. " +
			"Missing parent directories are created. To change part of an existing file, prefer edit_file.",
		params: object(map[string]*schema{
			"file_path": str("Path of the file to write. " + pathNote),
			"content":   str("The complete new content of the file."),
		}, "file_path", "content"),
		run: s.writeFile,
	}, {
		name: "edit_file",
		description: "Replace exact text in a file: old_string must appear in the file exactly as given, including whitespace and indentation " +
			"(without the line numbers read_file shows). If it appears more than once, add surrounding lines to make it unique, " +
			"or set replace_all to replace every occurrence. Read the file first.",
		params: object(map[string]*schema{
			"file_path":   str("Path of the file to edit. " + pathNote),
			"old_string":  str("The exact text to replace; it must not be empty."),
			"new_string":  str("The text to put in its place; it must differ from old_string."),
			"replace_all": {Type: "boolean", Description: "Replace every occurrence of old_string instead of requiring exactly one (default false).", Default: false},
		}, "file_path", "old_string", "new_string"),
		run: s.editFile,
	}, {
		name: "glob",
		description: "Find files by a glob pattern matched against their paths relative to path, such as \"**/*.go\" or \"src/*.{ts,tsx}\". " +
			"* and ? match within one path element, [abc] a character class, {a,b} alternatives, and ** any number of directories " +
			"(so \"*.go\" only matches in path itself). Returns matching file paths relative to the working directory, sorted; " +
			".git directories are skipped.",
		params: object(map[string]*schema{
			"pattern": str("The glob pattern, relative to path."),
			"path":    str("Directory to search in (default \".\", the working directory). " + pathNote),
		}, "pattern"),
		run: s.glob,
	}, {
		name: "grep",
		description: "Search file contents, line by line, for a regular expression (Go RE2 syntax: no lookaround or backreferences; " +
			"(?i) makes it case-insensitive). Searches a file, or every text file under a directory; .git directories and binary files are skipped. " +
			"output_mode \"files_with_matches\" (default) lists the matching files, \"content\" shows matching lines as path:line:text, " +
			"\"count\" shows path:number of matching lines.",
		params: object(map[string]*schema{
			"pattern":     str("The regular expression to search for."),
			"path":        str("File or directory to search (default \".\", the working directory). " + pathNote),
			"glob":        str("Only search files whose name or path matches this glob pattern, such as \"*.go\" or \"src/**/*.ts\"."),
			"output_mode": {Type: "string", Description: "What to show (default \"files_with_matches\").", Enum: []string{modeFiles, modeContent, modeCount}},
		}, "pattern"),
		run: s.grep,
	}, {
		name: "execute",
		description: fmt.Sprintf("Run a shell command with bash -lc in the working directory and return its output (stdout and stderr together) "+
			"followed by its exit status. stdin is empty, so the command must not wait for input. It is killed after timeout seconds "+
			"(default %s, at most %s), and any background processes it started are killed when it ends. "+
			"Long output keeps its beginning and its end.", timeout, maxTimeout),
		params: object(map[string]*schema{
			"command": str("The bash command to run."),
			"timeout": {Type: "number", Description: fmt.Sprintf("Seconds before the command is killed (default %s, at most %s).", timeout, maxTimeout), ExclusiveMinimum: &zero},
		}, "command"),
		run: s.execute,
	}, {
		name: "write_todos",
		description: "Replace the todo list, to plan and track work with several steps. Send the whole list every time. " +
			"Mark a task in_progress when you start it and completed as soon as it is done; keep one task in_progress at a time.",
		params: object(map[string]*schema{
			"todos": {Type: "array", Description: "The complete todo list, in order.", Items: object(map[string]*schema{
				"content": str("What the task is, in a short sentence."),
				"status":  {Type: "string", Description: "The task's state.", Enum: []string{"pending", "in_progress", "completed"}},
			}, "content", "status")},
		}, "todos"),
		run: s.writeTodos,
	}}
}

// buildTools encodes the definitions once, for every later call.
func (s *Set) buildTools() error {
	specs := s.specs()
	s.defs = make([]Definition, len(specs))
	s.runners = make(map[string]runner, len(specs))
	for i, t := range specs {
		params, err := json.Marshal(t.params)
		if err != nil {
			return fmt.Errorf("encode the schema of tool %s: %w", t.name, err)
		}
		s.defs[i] = Definition{Name: t.name, Description: t.description, Parameters: params}
		s.runners[t.name] = t.run
	}
	return nil
}
