package devcontainer

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, file, in string
		want           *Config
		err            string
	}{
		{
			name: "image, with comments and trailing commas",
			file: ".devcontainer.json",
			in:   "// env\n{\n\t\"name\": \"x\", /* c */\n\t\"image\": \"mcr.example/dev:1\",\n\t\"customizations\": {\"vscode\": {}},\n}\n",
			want: &Config{File: ".devcontainer.json", Image: "mcr.example/dev:1"},
		},
		{
			name: "dockerfile with its context and args",
			file: ".devcontainer/devcontainer.json",
			in:   `{"build": {"dockerfile": "Dockerfile", "context": "..", "args": {"V": "3", "U": "${localEnv:USER}"}, "target": "dev"}, "containerEnv": {"A": "1", "P": "${containerEnv:PATH}:/x"}, "remoteUser": "vscode"}`,
			want: &Config{File: ".devcontainer/devcontainer.json", Build: &Build{Dockerfile: ".devcontainer/Dockerfile", Context: ".", Args: map[string]string{"V": "3"}},
				ContainerEnv: map[string]string{"A": "1"}, RemoteUser: "vscode",
				Ignored: []string{"build.args.U (uses ${...})", "build.target", "containerEnv.P (uses ${...})"}},
		},
		{
			name: "the older dockerFile key; context defaults to the file's folder",
			file: ".devcontainer/devcontainer.json",
			in:   `{"dockerFile": "../Dockerfile"}`,
			want: &Config{File: ".devcontainer/devcontainer.json", Build: &Build{Dockerfile: "Dockerfile", Context: ".devcontainer", Args: map[string]string{}}},
		},
		{
			name: "commands in each form, in the lifecycle's order",
			file: ".devcontainer.json",
			in:   `{"image": "i", "postCreateCommand": {"b": ["make", "deps"], "a": "npm ci"}, "onCreateCommand": "echo hi", "postStartCommand": "x", "features": {}, "mounts": [], "forwardPorts": [1]}`,
			want: &Config{File: ".devcontainer.json", Image: "i", Commands: []Command{
				{Key: "onCreateCommand", Argv: []string{"sh", "-c", "echo hi"}},
				{Key: "postCreateCommand.a", Argv: []string{"sh", "-c", "npm ci"}},
				{Key: "postCreateCommand.b", Argv: []string{"make", "deps"}},
			}, Ignored: []string{"features", "forwardPorts", "mounts", "postStartCommand"}},
		},
		{
			name: "compose",
			file: ".devcontainer.json",
			in:   `{"dockerComposeFile": "c.yml", "service": "app"}`,
			want: &Config{File: ".devcontainer.json", Ignored: []string{"dockerComposeFile", "service"}},
		},
		{name: "not JSON", file: ".devcontainer.json", in: `{"image": }`, err: "not JSON with comments"},
		{name: "not an object", file: ".devcontainer.json", in: `[1]`, err: ".devcontainer.json: want a JSON object"},
		{name: "image and dockerfile", file: ".devcontainer.json", in: `{"image": "a", "build": {"dockerfile": "D"}}`, err: ".devcontainer.json: image: does not go with build.dockerfile: give one of them"},
		{name: "out of the repository", file: ".devcontainer/devcontainer.json", in: `{"build": {"dockerfile": "../../D"}}`, err: `.devcontainer/devcontainer.json: build.dockerfile: "../../D" leads out of the repository`},
		{name: "absolute context", file: ".devcontainer/devcontainer.json", in: `{"build": {"dockerfile": "D", "context": "/"}}`, err: `build.context: "/" is not a path relative to the devcontainer.json`},
		{name: "image with a variable", file: ".devcontainer.json", in: `{"image": "${localEnv:IMG}"}`, err: `image: "${localEnv:IMG}" uses ${...} substitution`},
		{name: "bad image", file: ".devcontainer.json", in: `{"image": "-v /:/host"}`, err: `image: "-v /:/host" is not an image reference`},
		{name: "image too long", file: ".devcontainer.json", in: `{"image": "` + strings.Repeat("a", 256) + `"}`, err: "is not an image reference"},
		{name: "empty command", file: ".devcontainer.json", in: `{"image": "i", "postCreateCommand": []}`, err: "postCreateCommand: want a command"},
		{name: "command of a wrong kind", file: ".devcontainer.json", in: `{"image": "i", "postCreateCommand": 3}`, err: "postCreateCommand: want a command"},
		{name: "bad env name", file: ".devcontainer.json", in: `{"image": "i", "containerEnv": {"A B": "1"}}`, err: `containerEnv.A B: is not an environment variable`},
		{name: "Amelia's env", file: ".devcontainer.json", in: `{"image": "i", "containerEnv": {"AMELIA_PROXY_TOKEN": "x"}}`, err: "containerEnv.AMELIA_PROXY_TOKEN: variables starting with AMELIA_ are Amelia's own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.file, []byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("Parse: %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
