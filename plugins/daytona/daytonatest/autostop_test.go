package daytonatest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
)

// Auto-stop as Daytona's: an idle sandbox stops after autoStopInterval
// minutes (here a minute lasts 10 s), keeping its files, whatever runs
// inside; an open gateway channel is activity, which keeps another
// started until it closes. The sandboxes start with an interval of an
// hour and get their minute (POST /sandbox/{id}/autostop/1) only once
// they are in use, so that however long a busy machine takes to log in,
// nothing stops under it. Its commands need their exit statuses: the
// gateway's loss is off.
func TestAutoStop(t *testing.T) {
	const minute = 10 * time.Second
	forEachBackend(t, Options{Minute: minute, ExitStatusLoss: -1}, func(t *testing.T, f *Fake) {
		e := newEnv(t, f)
		hour := 60
		idle, _ := e.started(t, api.CreateSandbox{Name: "idle", AutoStopInterval: &hour})
		if idle.AutoStopInterval == nil || *idle.AutoStopInterval != 60 {
			t.Errorf("created with autoStopInterval 60, the sandbox has %v", idle.AutoStopInterval)
		}
		held, _ := e.started(t, api.CreateSandbox{Name: "held", AutoStopInterval: &hour})
		never, _ := e.started(t, api.CreateSandbox{Name: "never", AutoStopInterval: new(int)})
		if err := e.c.SetAutoStopInterval(context.Background(), never.ID, -1); err == nil || !strings.Contains(err.Error(), "must be non-negative") {
			t.Errorf("a negative auto-stop interval: %v", err)
		}
		stopAfterAMinute := func(id string) {
			t.Helper()
			if err := e.c.SetAutoStopInterval(context.Background(), id, 1); err != nil {
				t.Fatal(err)
			}
		}

		c := e.login(t, idle.ID)
		// A process inside is no activity.
		if r := run(t, c, "echo kept > kept.txt; (sleep 600 </dev/null >/dev/null 2>&1 &) ; echo ok", ""); r.code != 0 {
			t.Fatalf("write a file: %+v", r)
		}
		c.Close()
		stopAfterAMinute(idle.ID)
		h := e.login(t, held.ID)
		s, err := h.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		in, _ := s.StdinPipe()
		if err := s.Start("cat"); err != nil {
			t.Fatal(err)
		}
		stopAfterAMinute(held.ID)
		heldFrom := time.Now()

		stopped, _ := e.waitState(t, idle.ID, api.StateStopped)
		if stopped.AutoStopInterval == nil || *stopped.AutoStopInterval != 1 {
			t.Errorf("the stopped sandbox's autoStopInterval: %v", stopped.AutoStopInterval)
		}
		// The held one is past its interval, and started: its channel's
		// keepalive is activity.
		for {
			sb, err := e.c.GetSandbox(context.Background(), held.ID)
			if err != nil {
				t.Fatal(err)
			}
			last, _ := time.Parse(time.RFC3339Nano, sb.LastActivityAt)
			if sb.State != api.StateStarted {
				t.Fatalf("a sandbox with an open channel is %s", sb.State)
			}
			if last.After(heldFrom.Add(minute + minute/2)) {
				break
			}
			if t.Context().Err() != nil {
				t.Fatal("the test ended before the open channel's keepalive updated lastActivityAt")
			}
			time.Sleep(50 * time.Millisecond)
		}
		in.Close()
		s.Wait()
		h.Close()
		e.waitState(t, held.ID, api.StateStopped)
		if sb, err := e.c.GetSandbox(context.Background(), never.ID); err != nil || sb.State != api.StateStarted {
			t.Errorf("autoStopInterval 0: %v %v, want started", sb.State, err)
		}

		// Stopped is kept: started again, its files are there. It stops
		// no more, or a busy machine could see it stopped again before
		// the look.
		if err := e.c.SetAutoStopInterval(context.Background(), idle.ID, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.StartSandbox(context.Background(), idle.ID); err != nil {
			t.Fatal(err)
		}
		e.waitState(t, idle.ID, api.StateStarted)
		if r := run(t, e.login(t, idle.ID), "cat kept.txt", ""); strings.TrimSpace(r.stdout) != "kept" {
			t.Errorf("after the auto-stop kept.txt holds %q", r.stdout)
		}
	})
}
