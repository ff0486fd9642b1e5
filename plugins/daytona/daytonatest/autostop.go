package daytonatest

import (
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
)

// Auto-stop, as Daytona's sandbox manager does it (sandbox.manager.ts
// autostopCheck, every 10 s): a sandbox that is started, wants to be,
// has no change pending and a non-zero autoStopInterval, whose last
// activity is older than that many minutes, is stopped (an ephemeral one,
// autoDeleteInterval 0, is deleted instead). Its last activity is set when
// it is created or started, by POST /sandbox/{id}/last-activity, by every
// toolbox request (Daytona's proxy sends one), and by the SSH gateway for
// each channel, when it opens and every 45 s while it is open
// (ssh-gateway/main.go). Processes inside the sandbox are no activity.
// Options.Minute scales all of it for tests.

// minute is how long a minute of Daytona's lasts in the fake.
func (f *Fake) minute() time.Duration { return f.opts.Minute }

// scaled is d of Daytona's time in the fake's.
func (f *Fake) scaled(d time.Duration) time.Duration {
	return max(time.Millisecond, time.Duration(float64(d)*float64(f.minute())/float64(time.Minute)))
}

// startAutoStop runs the auto-stop check until the fake stops.
func (f *Fake) startAutoStop() {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		t := time.NewTicker(f.scaled(10 * time.Second))
		defer t.Stop()
		for {
			select {
			case <-f.ctx.Done():
				return
			case <-t.C:
				f.autoStopCheck()
			}
		}
	}()
}

func (f *Fake) autoStopCheck() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	now := time.Now()
	for _, id := range f.order {
		s := f.boxes[id]
		if s == nil || s.state != api.StateStarted || s.desired != api.DesiredStarted || s.pending() || s.autoStop == 0 {
			continue
		}
		if !s.lastActivity.Before(now.Add(-time.Duration(s.autoStop * float64(f.minute())))) {
			continue
		}
		if s.autoDelete == 0 {
			f.logger.Debug("daytonatest: auto-stop deletes an ephemeral sandbox", "sandbox", s.id)
			s.desired = api.DesiredDestroyed
			f.transition(s, f.destroySteps(s, s.op), api.StateDestroyed, "")
			continue
		}
		f.logger.Debug("daytonatest: auto-stop", "sandbox", s.id, "last_activity", s.lastActivity)
		s.desired = api.DesiredStopped
		f.transition(s, f.stopSteps(s), api.StateStopped, "")
	}
}

// touch records activity of s now, as Daytona's last-activity update.
func (f *Fake) touch(s *sandbox) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s.lastActivity = f.activityLocked()
}

// keepAlive is the SSH gateway's activity for a channel of s: now, then
// every 45 s until the function it returns is called.
func (f *Fake) keepAlive(s *sandbox) (stop func()) {
	f.touch(s)
	done := make(chan struct{})
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		t := time.NewTicker(f.scaled(45 * time.Second))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-f.ctx.Done():
				return
			case <-t.C:
				f.touch(s)
			}
		}
	}()
	return func() { close(done) }
}
