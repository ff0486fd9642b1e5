package worker

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/workstep"
)

// prune-parked puts the parked checkouts older than its age into their
// uids' trash and drops their pool records, leaving the young ones; a
// dry run only lists them.
func TestStepPruneParked(t *testing.T) {
	root := t.TempDir()
	dot := filepath.Join(root, ".amelia")
	pk, pool := filepath.Join(dot, "parked"), filepath.Join(dot, "pool")
	for _, d := range []string{pk, pool} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	me := os.Getuid()
	now := time.Now().Unix()
	// Two "uids" of this test's: records are named by uid, and the
	// checkouts are this process's, which is all mineOf asks.
	park := func(uid int, name string, at int64) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(pk, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pk, name, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		rec := fmt.Sprintf("park %s key %d\n", name, at)
		if err := os.WriteFile(filepath.Join(pool, strconv.Itoa(uid)), []byte(rec), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	park(me, ".park-old", now-30*24*3600)
	other := me + 1
	park(other, ".park-young", now-60)

	run := func(dry bool) string {
		t.Helper()
		var out bytes.Buffer
		if err := stepPruneParked(t.Context(), workstep.PruneParked{Root: root, OlderThan: 14 * 24 * 3600, Dry: dry}, stepIO{stdout: &out, stderr: io.Discard}); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	dry := run(true)
	if !strings.HasPrefix(dry, fmt.Sprintf("parked %d .park-old ", me)) || strings.Count(dry, "\n") != 1 {
		t.Errorf("dry run: %q, want the old checkout alone", dry)
	}
	if _, err := os.Stat(filepath.Join(pk, ".park-old")); err != nil {
		t.Errorf("the dry run moved the old checkout: %v", err)
	}
	out := run(false)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], fmt.Sprintf("parked %d .park-old ", me)) || !strings.HasPrefix(lines[1], fmt.Sprintf("sweep %d .trash-", me)) {
		t.Fatalf("prune: %q, want the old checkout and its sweep", out)
	}
	trash := strings.Fields(lines[1])[2]
	if _, err := os.Stat(filepath.Join(pk, trash, "f")); err != nil {
		t.Errorf("the old checkout is not in the trash %s: %v", trash, err)
	}
	if _, err := os.Stat(filepath.Join(pool, strconv.Itoa(me))); !os.IsNotExist(err) {
		t.Errorf("the old checkout's pool record is still there: %v", err)
	}
	if rec, err := os.ReadFile(filepath.Join(dot, "trash", strconv.Itoa(me))); err != nil || strings.TrimSpace(string(rec)) != trash {
		t.Errorf("the uid's trash record: %q %v, want %s", rec, err, trash)
	}
	if _, err := os.Stat(filepath.Join(pool, strconv.Itoa(other))); err != nil {
		t.Errorf("the young checkout's record went: %v", err)
	}
	if _, err := os.Stat(filepath.Join(pk, ".park-young")); err != nil {
		t.Errorf("the young checkout went: %v", err)
	}
}
