package ssh_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/sshtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/sdktest"
	"github.com/amelia-sandbox/amelia/plugins/ssh"
)

// The test binary doubles as the plugin: launched by go-plugin (which sets
// the handshake cookie), it serves the SSH provider instead of testing.
func TestMain(m *testing.M) {
	if os.Getenv(sdk.Handshake.MagicCookieKey) != "" {
		sdk.Serve(ssh.New(ssh.Options{Version: "test"}))
		return
	}
	os.Exit(m.Run())
}

// settings are a profile's ssh block for srv, with the sandboxes in a
// fresh directory and no ~/.ssh/config of the user's in the way.
func settings(t *testing.T, srv *sshtest.Server, extra map[string]any) json.RawMessage {
	t.Helper()
	s := map[string]any{
		"host":           srv.Host,
		"port":           srv.Port,
		"user":           srv.User,
		"identity_files": []string{srv.ClientKey},
		"known_hosts":    srv.KnownHosts,
		"root":           t.TempDir(),
		"ssh_config":     filepath.Join(t.TempDir(), "no-config"),
	}
	for k, v := range extra {
		s[k] = v
	}
	b, _ := json.Marshal(s)
	return b
}

func pluginCommand() *exec.Cmd { return exec.Command(os.Args[0]) }

func TestConformance(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	sdktest.Run(t, sdktest.Config{
		Command:  pluginCommand,
		Settings: settings(t, srv, nil),
	})
}
