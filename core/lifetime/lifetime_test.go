package lifetime

import (
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// The constants the providers use are the watchdog's.
func TestSDKConstants(t *testing.T) {
	for _, c := range [][2]string{
		{Dir, sdk.LifetimeDir}, {StoppedFile, sdk.LifetimeStopped},
		{StopInit, sdk.StopInit}, {StopProcesses, sdk.StopProcesses}, {StopByProvider, sdk.StopByProvider},
	} {
		if c[0] != c[1] {
			t.Errorf("core/lifetime has %q, plugins/sdk %q", c[0], c[1])
		}
	}
}

func TestNext(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	p := Policy{IdleTimeout: 30 * time.Minute, MaxLifetime: 24 * time.Hour, Stop: StopInit}
	tests := []struct {
		name       string
		p          Policy
		now, last  time.Time
		busy       bool
		wantAt     time.Time
		wantReason string
		wantDue    bool
	}{
		{"fresh", p, t0, t0, false, t0.Add(30 * time.Minute), ReasonIdle, false},
		{"idle long enough", p, t0.Add(40 * time.Minute), t0.Add(10 * time.Minute), false, t0.Add(40 * time.Minute), ReasonIdle, true},
		{"busy: the idle clock waits", p, t0.Add(5 * time.Hour), t0, true, t0.Add(5*time.Hour + 30*time.Minute), ReasonIdle, false},
		{"lifetime first", p, t0.Add(23*time.Hour + 50*time.Minute), t0.Add(23*time.Hour + 49*time.Minute), false, t0.Add(24 * time.Hour), ReasonLifetime, false},
		{"past the lifetime, busy", p, t0.Add(25 * time.Hour), t0.Add(25 * time.Hour), true, t0.Add(24 * time.Hour), ReasonLifetime, false},
		{"past the lifetime, just idle", p, t0.Add(25 * time.Hour), t0.Add(25*time.Hour - 10*time.Second), false, t0.Add(24 * time.Hour), ReasonLifetime, false},
		{"past the lifetime, quiet", p, t0.Add(25 * time.Hour), t0.Add(25*time.Hour - time.Minute), false, t0.Add(24 * time.Hour), ReasonLifetime, true},
		{"idle off", Policy{MaxLifetime: time.Hour}, t0.Add(50 * time.Minute), t0, false, t0.Add(time.Hour), ReasonLifetime, false},
		{"both off", Policy{}, t0.Add(1000 * time.Hour), t0, false, time.Time{}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at, reason, due := tt.p.Next(tt.now, t0, tt.last, tt.busy)
			if !at.Equal(tt.wantAt) || reason != tt.wantReason || due != tt.wantDue {
				t.Errorf("Next = %v %q %v; want %v %q %v", at, reason, due, tt.wantAt, tt.wantReason, tt.wantDue)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	now := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		s    Status
		want string
	}{
		{Status{Watchdog: "running", StopsAt: now.Add(25 * time.Minute), Reason: ReasonIdle}, "idle at 08:25:00"},
		{Status{Watchdog: "running", StopsAt: now.Add(30 * time.Hour), Reason: ReasonLifetime}, "lifetime at Nov 30 14:00"},
		{Status{Watchdog: "running", Busy: true, StopsAt: now.Add(30 * time.Minute), Reason: ReasonIdle}, "busy; then idle at 08:30:00"},
		{Status{Watchdog: "running", Busy: true, StopsAt: now.Add(-time.Hour), Reason: ReasonLifetime}, "after its work (lifetime)"},
		{Status{Watchdog: "running"}, "never"},
		{Status{Watchdog: "none", Decided: &Decision{Reason: ReasonIdle, Idle: now.Add(-time.Hour)}}, "stopped: idle since 07:00:00"},
		{Status{Watchdog: "none"}, "-"},
	}
	for _, tt := range tests {
		if got := tt.s.Describe(now, time.UTC); got != tt.want {
			t.Errorf("Describe(%+v) = %q, want %q", tt.s, got, tt.want)
		}
	}
}
