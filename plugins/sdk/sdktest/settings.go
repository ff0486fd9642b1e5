package sdktest

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// The Settings group: the optional sdk.SettingsValidator agrees with
// EnsureRunning, so that `amelia config validate` refuses what a run
// would refuse, at the key, and nothing it would accept.

func (k *kit) settingsCases() []kcase {
	return []kcase{
		{"GoodSettingsHaveNoProblems", k.goodSettings},
		{"UnknownKeyIsAProblem", k.unknownKeyProblem},
		{"NestedUnknownKeyIsAProblem", k.nestedUnknownKeyProblem},
	}
}

// validate asks the provider to check settings, skipping the case when it
// cannot.
func (k *kit) validate(t T, settings json.RawMessage) []sdk.Problem {
	t.Helper()
	problems, err := k.p.ValidateSettings(k.ctx(t), sdk.ValidateRequest{Config: settings, Network: sdk.NetworkPolicy{Mode: k.cfg.Network}})
	if errors.Is(err, sdk.ErrUnsupported) {
		t.Skipf("the provider does not implement sdk.SettingsValidator (%v): amelia config validate says it cannot check its settings, which only EnsureRunning then refuses", err)
	}
	if err != nil {
		t.Fatalf("ValidateSettings: %v", err)
	}
	for _, p := range problems {
		if strings.TrimSpace(p.Message) == "" || strings.ContainsAny(p.Message, "\r\n") {
			t.Errorf("ValidateSettings: problem %q at %q: want a message on one line that says what is wrong", p.Message, p.Key)
		}
	}
	return problems
}

// The settings the kit's sandboxes start with, which EnsureRunning
// accepts, have no problem.
func (k *kit) goodSettings(t T) {
	if problems := k.validate(t, k.cfg.Settings); len(problems) > 0 {
		t.Errorf("ValidateSettings with Config.Settings and network %q, which EnsureRunning accepts: %q; want no problems", k.cfg.Network, problems)
	}
}

// A key the provider does not know is a problem at that key, as
// EnsureRunning refuses it (FailClosed/UnknownSettingsKeyRefused).
func (k *kit) unknownKeyProblem(t T) {
	settings := k.settingsObject(t)
	settings[unknownKey] = json.RawMessage(`true`)
	k.wantProblemAt(t, settings, unknownKey)
}

// A key the provider does not know inside a block of its settings is a
// problem at its whole path ("resources.KEY", not "KEY"), and
// EnsureRunning refuses it too.
func (k *kit) nestedUnknownKeyProblem(t T) {
	settings := k.settingsObject(t)
	var block string
	var inner map[string]json.RawMessage
	for _, key := range slices.Sorted(maps.Keys(settings)) {
		if json.Unmarshal(settings[key], &inner) == nil && inner != nil {
			block = key
			break
		}
	}
	if block == "" {
		t.Skipf("Config.Settings has no nested mapping to put an unknown key in")
	}
	inner[unknownKey] = json.RawMessage(`true`)
	settings[block], _ = json.Marshal(inner)
	key := sdk.JoinKey(block, unknownKey)
	k.wantProblemAt(t, settings, key)
	k.ensureRefuses(t, settings, key)
}

// settingsObject is Config.Settings as a JSON object's members.
func (k *kit) settingsObject(t T) map[string]json.RawMessage {
	t.Helper()
	settings := map[string]json.RawMessage{}
	if raw := bytes.TrimSpace(k.cfg.Settings); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		if err := json.Unmarshal(raw, &settings); err != nil {
			t.Fatalf("Config.Settings is not a JSON object (%v): the kit adds a key to it", err)
		}
	}
	return settings
}

// wantProblemAt checks that ValidateSettings finds a problem at key in
// settings, naming the unknown key.
func (k *kit) wantProblemAt(t T, settings map[string]json.RawMessage, key string) {
	t.Helper()
	raw, _ := json.Marshal(settings)
	problems := k.validate(t, raw)
	for _, p := range problems {
		if p.Key == key && strings.HasPrefix(p.Message, "unknown key") {
			return
		}
	}
	t.Errorf("ValidateSettings with the unknown key %s: problems %q; want one at Problem.Key %q saying it is an unknown key (sdk.DecodeSettings reports it so)", key, problems, key)
}
