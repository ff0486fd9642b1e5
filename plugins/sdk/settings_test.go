package sdk_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// size is a value that decodes itself, as a provider's memory setting does.
type size int64

func (s *size) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err != nil || !strings.HasSuffix(str, "g") {
		return fmt.Errorf("%s is not a size (like 4g)", b)
	}
	*s = 1 << 30
	return nil
}

type limits struct {
	CPUs   float64 `json:"cpus"`
	Memory size    `json:"memory"`
	Pids   int     `json:"pids"`
}

type mount struct {
	Path string `json:"path"`
}

// Common is embedded: its keys are the block's own.
type Common struct {
	Region string `json:"region"`
}

type settings struct {
	Common
	Root    string            `json:"root"`
	Limits  limits            `json:"limits"`
	Extra   *limits           `json:"extra"`
	Labels  map[string]string `json:"labels"`
	Mounts  []mount           `json:"mounts"`
	ByName  map[string]mount  `json:"by_name"`
	Ignored string            `json:"-"`
}

func TestDecodeSettings(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		want      settings
		problems  []sdk.Problem
	}{
		{name: "empty leaves the defaults", raw: ``, want: settings{Root: "/default"}},
		{name: "blank leaves the defaults", raw: " \n", want: settings{Root: "/default"}},
		{name: "null leaves the defaults", raw: "null", want: settings{Root: "/default"}},
		{
			name: "keys it knows",
			raw:  `{"root":"/r","region":"eu","limits":{"cpus":2,"memory":"4g"},"extra":{"pids":3},"labels":{"a.b":"c"},"mounts":[{"path":"/m"}],"by_name":{"x":{"path":"/x"}}}`,
			want: settings{
				Common: Common{Region: "eu"}, Root: "/r", Limits: limits{CPUs: 2, Memory: 1 << 30}, Extra: &limits{Pids: 3},
				Labels: map[string]string{"a.b": "c"}, Mounts: []mount{{"/m"}}, ByName: map[string]mount{"x": {"/x"}},
			},
		},
		{name: "a key in another case", raw: `{"Root":"/r"}`, want: settings{Root: "/r"}},
		{
			name:     "an unknown key, with the one it is a typo of",
			raw:      `{"root":"/r","rooot":"/s"}`,
			problems: []sdk.Problem{{Key: "rooot", Message: "unknown key, did you mean root? (known: region, root, limits, extra, labels, mounts, by_name)"}},
		},
		{
			name:     "an unknown key like none",
			raw:      `{"colour":"red"}`,
			problems: []sdk.Problem{{Key: "colour", Message: "unknown key (known: region, root, limits, extra, labels, mounts, by_name)"}},
		},
		{
			name: "every problem, each at its full path",
			raw:  `{"limits":{"memroy":"4g","memory":"4x","cpus":"two"},"extra":{"pid":1},"mounts":[{"path":"/a"},{"paht":"/b"}],"by_name":{"a.b":{"path":3}},"labels":{"k":1},"Ignored":"x"}`,
			problems: []sdk.Problem{
				{Key: "Ignored", Message: "unknown key (known: region, root, limits, extra, labels, mounts, by_name)"},
				{Key: `by_name."a.b".path`, Message: "want a string, not a number"},
				{Key: "extra.pid", Message: "unknown key, did you mean pids? (known: cpus, memory, pids)"},
				{Key: "labels.k", Message: "want a string, not a number"},
				{Key: "limits.cpus", Message: "want a number, not a string"},
				{Key: "limits.memory", Message: `"4x" is not a size (like 4g)`},
				{Key: "limits.memroy", Message: "unknown key, did you mean memory? (known: cpus, memory, pids)"},
				{Key: "mounts[1].paht", Message: "unknown key, did you mean path? (known: path)"},
			},
		},
		{name: "not a whole number", raw: `{"limits":{"pids":1.5}}`, problems: []sdk.Problem{{Key: "limits.pids", Message: "1.5 is not a whole number"}}},
		{name: "out of range", raw: `{"limits":{"pids":1e30}}`, problems: []sdk.Problem{{Key: "limits.pids", Message: "1e30 is out of range"}}},
		{name: "a list for a mapping", raw: `{"limits":[1]}`, problems: []sdk.Problem{{Key: "limits", Message: "want a mapping, not a list"}}},
		{name: "a mapping for a list", raw: `{"mounts":{"path":"/"}}`, problems: []sdk.Problem{{Key: "mounts", Message: "want a list, not a mapping"}}},
		{name: "a number for a mapping", raw: `{"limits":3}`, problems: []sdk.Problem{{Key: "limits", Message: "want a mapping, not a number"}}},
		{name: "a string for a mapping", raw: `{"labels":"a=b"}`, problems: []sdk.Problem{{Key: "labels", Message: "want a mapping, not a string"}}},
		{name: "true for a list", raw: `{"mounts":true}`, problems: []sdk.Problem{{Key: "mounts", Message: "want a list, not true or false"}}},
		{name: "a number for a list", raw: `{"mounts":[{"path":"/"}, 2]}`, problems: []sdk.Problem{{Key: "mounts[1]", Message: "want a mapping, not a number"}}},
		{name: "not a mapping", raw: `["root"]`, problems: []sdk.Problem{{Message: "want a mapping, not a list"}}},
		{name: "a number, not a mapping", raw: `7`, problems: []sdk.Problem{{Message: "want a mapping, not a number"}}},
		{name: "two values", raw: `{"root":"/r"} {"root":"/s"}`, problems: []sdk.Problem{{Message: "the settings are more than one JSON value"}}},
		{name: "not JSON", raw: `{root: /r}`, problems: []sdk.Problem{{Message: "the settings are not JSON: invalid character 'r' looking for beginning of object key string"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := settings{Root: "/default"}
			err := sdk.DecodeSettings(json.RawMessage(tc.raw), "hello", &got)
			if tc.problems == nil {
				if err != nil || !reflect.DeepEqual(got, tc.want) {
					t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
				}
				return
			}
			var se *sdk.SettingsError
			if !errors.As(err, &se) || !errors.Is(err, sdk.ErrInvalid) || se.Block != "hello" {
				t.Fatalf("err = %#v, want a *SettingsError of block hello matching ErrInvalid", err)
			}
			if !slices.Equal(se.Problems, tc.problems) {
				t.Errorf("problems:\n%q\nwant:\n%q", se.Problems, tc.problems)
			}
			first := "hello: " + tc.problems[0].Message
			if tc.problems[0].Key != "" {
				first = "hello." + tc.problems[0].String()
			}
			if !strings.HasPrefix(err.Error(), first) {
				t.Errorf("err = %q, want it to start with %q", err, first)
			}
		})
	}
}

// An array is decoded whole, by encoding/json: a problem inside it is at
// the path encoding/json reports, joined key by key.
func TestDecodeSettingsInsideAWholeValue(t *testing.T) {
	type cell struct {
		Y struct {
			Z int `json:"z"`
		} `json:"y"`
	}
	var got struct {
		Cells [2]cell `json:"cells"`
	}
	err := sdk.DecodeSettings(json.RawMessage(`{"cells":[{"y":{"z":1}},{"y":{"z":"q"}}]}`), "hello", &got)
	want := []sdk.Problem{{Key: "cells.y.z", Message: "want a whole number, not a string"}}
	var se *sdk.SettingsError
	if !errors.As(err, &se) || !slices.Equal(se.Problems, want) {
		t.Errorf("err = %v; want the problems %q", err, want)
	}
}

// A field's ",string" option is not honoured: its value is written as
// its type reads it, unquoted.
func TestDecodeSettingsIgnoresTheStringOption(t *testing.T) {
	var got struct {
		Port int `json:"port,string"`
	}
	if err := sdk.DecodeSettings(json.RawMessage(`{"port":22}`), "hello", &got); err != nil || got.Port != 22 {
		t.Errorf("port 22: got %d, %v; want 22", got.Port, err)
	}
	err := sdk.DecodeSettings(json.RawMessage(`{"port":"22"}`), "hello", &got)
	want := []sdk.Problem{{Key: "port", Message: "want a whole number, not a string"}}
	var se *sdk.SettingsError
	if !errors.As(err, &se) || !slices.Equal(se.Problems, want) {
		t.Errorf("port \"22\": err = %v; want the problems %q", err, want)
	}
}

func TestDecodeSettingsWantsAPointer(t *testing.T) {
	var s settings
	err := sdk.DecodeSettings(json.RawMessage(`{"root":"/r"}`), "hello", s)
	var se *sdk.SettingsError
	if err == nil || errors.As(err, &se) {
		t.Errorf("err = %v, want an error that is no SettingsError (a provider's bug, not the profile's)", err)
	}
}

func TestSettingsProblems(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		problems []sdk.Problem
		fails    bool
	}{
		{name: "no error, no problems", err: nil},
		{
			name:     "a settings error's problems",
			err:      fmt.Errorf("start: %w", sdk.InvalidSetting("docker", "resources.cpus", "%d is not a number of CPUs", -1)),
			problems: []sdk.Problem{{Key: "resources.cpus", Message: "-1 is not a number of CPUs"}},
		},
		{
			name:     "another invalid error is the block's",
			err:      sdk.Errorf(sdk.ErrInvalid, "ssh config /x: bad\nline"),
			problems: []sdk.Problem{{Message: "ssh config /x: bad line"}},
		},
		{name: "any other error is the check's own", err: sdk.Errorf(sdk.ErrUnavailable, "no disk"), fails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sdk.SettingsProblems(tc.err)
			if (err != nil) != tc.fails || !slices.Equal(got, tc.problems) {
				t.Errorf("got %q, %v; want %q (error: %v)", got, err, tc.problems, tc.fails)
			}
		})
	}
	if err := sdk.InvalidSetting("docker", "user", "%q is not a user", "x y"); err.Error() != `docker.user: "x y" is not a user` || !errors.Is(err, sdk.ErrInvalid) {
		t.Errorf("InvalidSetting: %v", err)
	}
}

func TestClosest(t *testing.T) {
	known := []string{"cpus", "memory", "pids"}
	for _, tc := range []struct{ s, want string }{
		{"memroy", "memory"}, {"MEMORY", "memory"}, {"cpu", "cpus"}, {"pid", "pids"},
		{"colour", ""}, {"m", ""}, {"", ""},
	} {
		if got := sdk.Closest(tc.s, known); got != tc.want {
			t.Errorf("Closest(%q) = %q, want %q", tc.s, got, tc.want)
		}
	}
}

func TestUnknownKeyMessage(t *testing.T) {
	known := []string{"cpus", "memory"}
	for _, tc := range []struct{ key, hint, want string }{
		{"memroy", "", "unknown key, did you mean memory? (known: cpus, memory)"},
		{"colour", "", "unknown key (known: cpus, memory)"},
		{"memroy", "or a map of settings", "unknown key, did you mean memory? (known: cpus, memory, or a map of settings)"},
		{"colour", "or a map of settings", "unknown key (known: cpus, memory, or a map of settings)"},
	} {
		if got := sdk.UnknownKeyMessage(tc.key, known, tc.hint); got != tc.want {
			t.Errorf("UnknownKeyMessage(%q, %q, %q) = %q, want %q", tc.key, known, tc.hint, got, tc.want)
		}
	}
}

func TestJoinKey(t *testing.T) {
	for _, tc := range []struct{ at, key, want string }{
		{"", "docker", "docker"},
		{"resources", "memory", "resources.memory"},
		{"labels", "com.example.team", `labels."com.example.team"`},
		{"env[2]", "a b", `env[2]."a b"`},
		{"x", "", `x.""`},
	} {
		if got := sdk.JoinKey(tc.at, tc.key); got != tc.want {
			t.Errorf("JoinKey(%q, %q) = %q, want %q", tc.at, tc.key, got, tc.want)
		}
	}
}
