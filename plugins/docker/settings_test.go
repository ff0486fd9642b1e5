package docker

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// toolchain is the default packages, as normalize sets them.
func toolchain() *[]string {
	p := slices.Clone(image.Toolchain)
	return &p
}

func TestDecodeSettings(t *testing.T) {
	home, _ := os.UserHomeDir()
	for _, tt := range []struct {
		name, in string
		want     Settings
		err      string
	}{
		{name: "defaults", in: ``, want: Settings{BaseImage: "debian:bookworm-slim", Packages: toolchain(), Devcontainer: "auto", User: "amelia", Resources: Resources{Pids: 1024}}},
		{name: "null", in: `null`, want: Settings{BaseImage: "debian:bookworm-slim", Packages: toolchain(), Devcontainer: "auto", User: "amelia", Resources: Resources{Pids: 1024}}},
		{
			name: "everything",
			in:   `{"base_image":"amelia-base:bookworm","user":"1000:1000","resources":{"cpus":1.5,"memory":"512m","pids":64},"labels":{"team":"x"},"context":"remote","packages":["git","g++"],"env":{"CI":"1"},"devcontainer":"off"}`,
			want: Settings{BaseImage: "amelia-base:bookworm", Packages: &[]string{"git", "g++"}, Env: map[string]string{"CI": "1"}, Devcontainer: "off", User: "1000:1000", Context: "remote", Resources: Resources{CPUs: 1.5, Memory: 512 << 20, Pids: 64}, Labels: map[string]string{"team": "x"}},
		},
		{name: "memory in bytes", in: `{"resources":{"memory":1073741824}}`, want: Settings{BaseImage: "debian:bookworm-slim", Packages: toolchain(), Devcontainer: "auto", User: "amelia", Resources: Resources{Memory: 1 << 30, Pids: 1024}}},
		{name: "no packages", in: `{"packages":[]}`, want: Settings{BaseImage: "debian:bookworm-slim", Packages: &[]string{}, Devcontainer: "auto", User: "amelia", Resources: Resources{Pids: 1024}}},
		{
			name: "dockerfile with a home path",
			in:   `{"dockerfile":"~/p/.devcontainer/Dockerfile","build_args":{"VARIANT":"3.11"}}`,
			want: Settings{Dockerfile: filepath.Join(home, "p/.devcontainer/Dockerfile"), BuildContext: filepath.Join(home, "p/.devcontainer"), BuildArgs: map[string]string{"VARIANT": "3.11"}, Packages: &[]string{}, Devcontainer: "auto", User: "amelia", Resources: Resources{Pids: 1024}},
		},
		{
			name: "a devcontainer's image gets no toolchain",
			in:   `{"base_image":"team/dev:1","devcontainer_file":".devcontainer/devcontainer.json"}`,
			want: Settings{BaseImage: "team/dev:1", Packages: &[]string{}, Devcontainer: "auto", DevcontainerFile: ".devcontainer/devcontainer.json", User: "amelia", Resources: Resources{Pids: 1024}},
		},
		{name: "dockerfile asking for packages", in: `{"dockerfile":"/d/Dockerfile","packages":["make"]}`, want: Settings{Dockerfile: "/d/Dockerfile", BuildContext: "/d", Packages: &[]string{"make"}, Devcontainer: "auto", User: "amelia", Resources: Resources{Pids: 1024}}},
		{name: "ready image", in: `{"image":"registry.example/team/img:1"}`, want: Settings{Image: "registry.example/team/img:1", Devcontainer: "auto", User: "amelia", Resources: Resources{Pids: 1024}}},
		{name: "unknown key", in: `{"imagee":"x"}`, err: `docker.imagee: unknown key, did you mean image? (known: image, base_image, dockerfile, build_context, build_args, packages, env, devcontainer, devcontainer_file, host, context, user, resources, labels, tmpfs)`},
		{name: "bad package", in: `{"packages":["make","python3; rm -rf /"]}`, err: `docker.packages[1]: "python3; rm -rf /" is not a Debian package name (lowercase letters, digits, '+', '-' and '.', like build-essential or python3-venv)`},
		{name: "option as a package", in: `{"packages":["--allow-unauthenticated"]}`, err: `docker.packages[0]: "--allow-unauthenticated" is not a Debian package name (lowercase letters, digits, '+', '-' and '.', like build-essential or python3-venv)`},
		{name: "packages with a ready image", in: `{"image":"a","packages":[]}`, err: "docker.packages: does not go with docker.image, a ready image used as it is: install them in that image"},
		{name: "build args without dockerfile", in: `{"build_args":{"A":"1"}}`, err: "docker.build_args: are the build arguments of docker.dockerfile, which is not set"},
		{name: "bad env name", in: `{"env":{"A-B":"1"}}`, err: "docker.env.A-B: is not an environment variable (a name of letters, digits and _, not starting with a digit, and a value without NUL)"},
		{name: "amelia env", in: `{"env":{"AMELIA_SANDBOX":"x"}}`, err: "docker.env.AMELIA_SANDBOX: variables starting with AMELIA_ are Amelia's own"},
		{name: "devcontainer neither", in: `{"devcontainer":"on"}`, err: `docker.devcontainer: "on" is neither auto nor off`},
		{name: "devcontainer file outside", in: `{"devcontainer_file":"../x.json"}`, err: `docker.devcontainer_file: "../x.json" is not a path inside a repository`},
		{name: "every problem of the block", in: `{"resources":{"memroy":"4g","memory":"4x"},"user":1}`, err: `docker.resources.memory: "4x" is not a size (write bytes, or a size like 4g or 512MiB); docker.resources.memroy: unknown key, did you mean memory? (known: cpus, memory, pids); docker.user: want a string, not a number`},
		{name: "wrong type", in: `{"resources":{"cpus":"two"}}`, err: `docker.resources.cpus: want a number, not a string`},
		{name: "labels not a mapping", in: `{"labels":["a"]}`, err: `docker.labels: want a mapping, not a list`},
		{name: "image and base", in: `{"image":"a","base_image":"b"}`, err: "docker.image: is a ready image used as it is; it does not go with base_image or dockerfile (those build Amelia's image)"},
		{name: "base and dockerfile", in: `{"base_image":"a","dockerfile":"/d/Dockerfile"}`, err: "docker.base_image: does not go with dockerfile: the image your Dockerfile builds is the base"},
		{name: "context without dockerfile", in: `{"build_context":"/d"}`, err: "docker.build_context: is the context of docker.dockerfile, which is not set"},
		{name: "relative dockerfile", in: `{"dockerfile":"Dockerfile"}`, err: `docker.dockerfile: "Dockerfile" must be an absolute path (or start with ~/)`},
		{name: "host and context", in: `{"host":"unix:///x","context":"y"}`, err: "docker.host: does not go with docker.context: the context names the engine"},
		{name: "bad image", in: `{"image":"-rm"}`, err: `docker.image: "-rm" is not an image reference (like debian:bookworm-slim or registry.example.com/team/img:tag)`},
		{name: "bad user", in: `{"user":"root; rm -rf /"}`, err: `docker.user: "root; rm -rf /" is not a user name or uid[:gid]`},
		{name: "bad memory", in: `{"resources":{"memory":"4x"}}`, err: `docker.resources.memory: "4x" is not a size (write bytes, or a size like 4g or 512MiB)`},
		{name: "memory not a size", in: `{"resources":{"memory":true}}`, err: `docker.resources.memory: true is not a size (write bytes, or a size like 4g or 512MiB)`},
		{name: "tiny memory", in: `{"resources":{"memory":1024}}`, err: "docker.resources.memory: 1024 bytes is too little: a container needs at least 6MiB"},
		{name: "negative cpus", in: `{"resources":{"cpus":-1}}`, err: "docker.resources.cpus: -1 is not a number of CPUs (like 2 or 0.5)"},
		{name: "tmpfs", in: `{"tmpfs":{"/workspace/small":"1m"}}`, want: Settings{BaseImage: "debian:bookworm-slim", Packages: toolchain(), Devcontainer: "auto", User: "amelia", Resources: Resources{Pids: 1024}, Tmpfs: map[string]Memory{"/workspace/small": 1 << 20}}},
		{name: "tmpfs not absolute", in: `{"tmpfs":{"scratch":"1m"}}`, err: "docker.tmpfs.scratch: is not a clean absolute path in the container other than / (like /scratch)"},
		{name: "tmpfs of no size", in: `{"tmpfs":{"/s":0}}`, err: "docker.tmpfs./s: 0 bytes is not a size: give one like 64m"},
		{name: "amelia label", in: `{"labels":{"amelia.profile":"x"}}`, err: `docker.labels."amelia.profile": labels starting with "amelia." are Amelia's own`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeSettings(json.RawMessage(tt.in))
			if tt.err != "" {
				if err == nil || err.Error() != tt.err || !errors.Is(err, sdk.ErrInvalid) {
					t.Errorf("error %v, want %q (invalid)", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tt.want)
			if string(gj) != string(wj) {
				t.Errorf("settings\n got %s\nwant %s", gj, wj)
			}
		})
	}
}

// The example config's docker block is one the provider accepts.
func TestExampleConfigSettings(t *testing.T) {
	cfg, err := config.Load(config.Options{
		Path:      filepath.Join("..", "..", "configs", "example.yaml"),
		LookupEnv: func(k string) (string, bool) { return map[string]string{"HOME": "/home/u"}[k], k == "HOME" },
		HomeDir:   "/home/u",
	})
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Profiles["docker"]
	if p == nil || p.Sandbox.Provider != Name {
		t.Fatalf("the example has no docker profile: %+v", cfg.Profiles)
	}
	b, _ := json.Marshal(p.Sandbox.ProviderSettings())
	set, err := decodeSettings(b)
	if err != nil {
		t.Fatalf("the example's docker settings: %v", err)
	}
	if set.Resources.Memory != 4<<30 || set.Resources.CPUs != 2 || set.Labels["com.example.team"] != "platform" {
		t.Errorf("decoded %+v", set)
	}
}

// ValidateSettings answers every problem of the block at its key, and
// none for good settings, whatever the network mode.
func TestValidateSettings(t *testing.T) {
	p := New(Options{})
	for _, tc := range []struct {
		in   string
		want []sdk.Problem
	}{
		{in: `{"base_image":"amelia-base:bookworm","resources":{"memory":"4g"}}`},
		{in: `{"resources":{"memroy":"4g","memory":"4x"}}`, want: []sdk.Problem{
			{Key: "resources.memory", Message: `"4x" is not a size (write bytes, or a size like 4g or 512MiB)`},
			{Key: "resources.memroy", Message: "unknown key, did you mean memory? (known: cpus, memory, pids)"},
		}},
		{in: `{"user":"a b"}`, want: []sdk.Problem{{Key: "user", Message: `"a b" is not a user name or uid[:gid]`}}},
	} {
		for _, mode := range []sdk.NetworkMode{sdk.NetworkOpen, sdk.NetworkNone} {
			got, err := p.ValidateSettings(t.Context(), sdk.ValidateRequest{Config: json.RawMessage(tc.in), Network: sdk.NetworkPolicy{Mode: mode}})
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("%s, network %s: %q, %v; want %q", tc.in, mode, got, err, tc.want)
			}
		}
	}
}
