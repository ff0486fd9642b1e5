package config

import (
	"testing"
	"time"
)

func TestSandboxLifetime(t *testing.T) {
	tests := []struct {
		name, sandbox     string
		env               testEnv
		idle, lifetime    time.Duration
		showIdle, showMax any
	}{
		{name: "defaults", sandbox: `{provider: docker}`, idle: 30 * time.Minute, lifetime: 24 * time.Hour},
		{name: "durations", sandbox: `{provider: docker, idle_timeout: 45m, max_lifetime: 8h}`, idle: 45 * time.Minute, lifetime: 8 * time.Hour, showIdle: "45m0s", showMax: "8h0m0s"},
		{name: "off", sandbox: `{provider: docker, idle_timeout: off, max_lifetime: "OFF"}`, showIdle: "off", showMax: "off"},
		{name: "zero", sandbox: `{provider: docker, idle_timeout: 0, max_lifetime: "0"}`, showIdle: "off", showMax: "off"},
		{name: "seconds", sandbox: `{provider: docker, idle_timeout: 3s}`, idle: 3 * time.Second, lifetime: 24 * time.Hour, showIdle: "3s"},
		{name: "from a variable", sandbox: `{provider: docker, idle_timeout: "${IDLE:-off}"}`, env: testEnv{"IDLE": "2h"}, idle: 2 * time.Hour, lifetime: 24 * time.Hour, showIdle: "2h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, profileWith("sandbox: "+tt.sandbox+"\n"), tt.env)
			sb := mustProfile(t, c, "dev").Sandbox
			if sb.Idle() != tt.idle || sb.Lifetime() != tt.lifetime {
				t.Errorf("idle %v, lifetime %v; want %v, %v", sb.Idle(), sb.Lifetime(), tt.idle, tt.lifetime)
			}
			for _, f := range []struct {
				key  string
				want any
			}{{"idle_timeout", tt.showIdle}, {"max_lifetime", tt.showMax}} {
				field := lifetimeKey(f.key, idleTimeout)
				if f.key == "max_lifetime" {
					field = lifetimeKey(f.key, maxLifetime)
				}
				if got := field.show(nil, path{}, &sb); got != f.want {
					t.Errorf("%s shows as %v, want %v", f.key, got, f.want)
				}
			}
		})
	}
}
