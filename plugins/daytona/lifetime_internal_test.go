package daytona

import (
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// sandbox.idle_timeout becomes autoStopInterval in whole minutes, rounded
// up; off never stops; an explicit daytona.auto_stop_interval wins.
func TestAutoStopFromIdleTimeout(t *testing.T) {
	ptr := func(n int) *int { return &n }
	for _, c := range []struct {
		name     string
		idle     time.Duration
		explicit *int
		want     *int
	}{
		{"not said: Daytona's default", 0, nil, nil},
		{"off", -1, nil, ptr(0)},
		{"seconds round up to a minute", 3 * time.Second, nil, ptr(1)},
		{"30m", 30 * time.Minute, nil, ptr(30)},
		{"30m1s", 30*time.Minute + time.Second, nil, ptr(31)},
		{"the block's own wins", 30 * time.Minute, ptr(5), ptr(5)},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := Settings{AutoStopInterval: c.explicit}.createRequest(sdk.Spec{Lifetime: sdk.Lifetime{IdleTimeout: c.idle}}, false)
			switch got := req.AutoStopInterval; {
			case (got == nil) != (c.want == nil):
				t.Errorf("autoStopInterval = %v, want %v", got, c.want)
			case got != nil && *got != *c.want:
				t.Errorf("autoStopInterval = %d, want %d", *got, *c.want)
			}
		})
	}
}
