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
// started until it closes. Each sandbox is used as soon as it has
// started, before the next is made: a minute is all a busy machine has
// to log in to it. Its commands need their exit statuses: the gateway's
// loss is off.
func TestAutoStop(t *testing.T) {
	const minute = 10 * time.Second
	forEachBackend(t, Options{Minute: minute, ExitStatusLoss: -1}, func(t *testing.T, f *Fake) {
		e := newEnv(t, f)
		one := 1
		idle, _ := e.started(t, api.CreateSandbox{Name: "idle", AutoStopInterval: &one})
		c := e.login(t, idle.ID)
		// A process inside is no activity.
		if r := run(t, c, "echo kept > kept.txt; (sleep 600 </dev/null >/dev/null 2>&1 &) ; echo ok", ""); r.code != 0 {
			t.Fatalf("write a file: %+v", r)
		}
		c.Close()
		held, _ := e.started(t, api.CreateSandbox{Name: "held", AutoStopInterval: &one})
		h := e.login(t, held.ID)
		s, err := h.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		in, _ := s.StdinPipe()
		if err := s.Start("cat"); err != nil {
			t.Fatal(err)
		}

		never, _ := e.started(t, api.CreateSandbox{Name: "never", AutoStopInterval: new(int)})

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
			created, _ := time.Parse(time.RFC3339Nano, held.CreatedAt)
			if sb.State != api.StateStarted {
				t.Fatalf("a sandbox with an open channel is %s", sb.State)
			}
			if last.After(created.Add(minute + minute/2)) {
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
