package sdk_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

func TestDecodeSettings(t *testing.T) {
	type limits struct {
		CPUs float64 `json:"cpus"`
	}
	type settings struct {
		Root   string `json:"root"`
		Limits limits `json:"limits"`
	}
	for _, tc := range []struct {
		name, raw string
		want      settings
		err       string // empty: no error
	}{
		{"empty leaves the defaults", ``, settings{Root: "/default"}, ""},
		{"blank leaves the defaults", " \n", settings{Root: "/default"}, ""},
		{"keys it knows", `{"root":"/r","limits":{"cpus":2}}`, settings{Root: "/r", Limits: limits{CPUs: 2}}, ""},
		{"an unknown key", `{"root":"/r","rooot":"/s"}`, settings{}, `"rooot"`},
		{"an unknown nested key", `{"limits":{"cpu":2}}`, settings{}, `unknown field "cpu"`},
		{"a value of the wrong kind", `{"limits":{"cpus":"two"}}`, settings{}, "hello.limits.cpus: want a number, not a string"},
		{"not a mapping", `["root"]`, settings{}, "hello: want a mapping, not a list"},
		{"two values", `{"root":"/r"} {"root":"/s"}`, settings{}, "more than one JSON value"},
		{"not JSON", `{root: /r}`, settings{}, "hello settings: invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := settings{Root: "/default"}
			err := sdk.DecodeSettings(json.RawMessage(tc.raw), "hello", &got)
			if tc.err == "" {
				if err != nil || got != tc.want {
					t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
				}
				return
			}
			if !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("err = %v, want ErrInvalid containing %q", err, tc.err)
			}
		})
	}
}
