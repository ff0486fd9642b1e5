package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/amelia-sandbox/amelia/plugins/sdk/sdktest"
)

// Launched by go-plugin (which sets the handshake cookie), the test binary
// is the plugin itself.
func TestMain(m *testing.M) {
	if sdktest.LaunchedAsPlugin() {
		main()
		return
	}
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	settings, _ := json.Marshal(map[string]string{"root": t.TempDir()})
	sdktest.Run(t, sdktest.Config{
		Command:  func() *exec.Cmd { return exec.Command(os.Args[0]) },
		Settings: settings,
	})
}
