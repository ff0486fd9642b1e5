package runstore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// LogRetention is how long Logs keeps a run's log after the run ended.
const LogRetention = 7 * 24 * time.Hour

// Logs is this host's copy of the agent's messages of the runs it showed,
// kept for LogRetention once the run has ended: a delivered run leaves
// nothing in its sandbox, so `amelia logs` reads it here. A log is one
// file, DIR/<profile>/<workflow>.jsonl (the worker's lines as the run
// showed them), mode 0600 in a 0700 directory; a later run of the same
// workflow replaces it. It is written to a temporary file beside it while
// the run goes on and renamed into place when the run ends, so a reader
// sees a whole log or the one before; what a host that died mid-run was
// writing is removed with the expired logs.
type Logs struct{ dir string }

// NewLogs is the logs in dir (created when the first log is written).
func NewLogs(dir string) *Logs { return &Logs{dir: dir} }

// partialSuffix ends the name of a log being written.
const partialSuffix = ".partial"

// LogWriter is the log of one run in progress.
type LogWriter struct {
	logs  *Logs
	f     *os.File
	final string
	err   error // the first write error: the log is not kept
}

// Create starts the log of a run of workflow in profile.
func (l *Logs) Create(profile, workflow string) (*LogWriter, error) {
	final, err := l.path(profile, workflow)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return nil, fmt.Errorf("keep the log of %s: %w", workflow, err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	tmp := filepath.Join(filepath.Dir(final), "."+workflow+"."+hex.EncodeToString(b)+partialSuffix)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("keep the log of %s: %w", workflow, err)
	}
	return &LogWriter{logs: l, f: f, final: final}, nil
}

// WriteLine appends one line (without its newline) to the log.
func (w *LogWriter) WriteLine(line []byte) {
	if w.err != nil {
		return
	}
	_, w.err = w.f.Write(append(slices.Clip(line), '\n'))
}

// Keep ends the log and puts it in place, replacing the workflow's log
// before it, then removes the logs that expired.
func (w *LogWriter) Keep() error {
	err := errors.Join(w.err, w.f.Close())
	if err == nil {
		err = os.Rename(w.f.Name(), w.final)
	}
	if err != nil {
		os.Remove(w.f.Name())
		return fmt.Errorf("keep the log %s: %w", w.final, err)
	}
	return w.logs.Prune(time.Now())
}

// Open opens the log of workflow in profile, with when it was last
// written; ErrNotFound when there is none.
func (l *Logs) Open(profile, workflow string) (*os.File, time.Time, error) {
	p, err := l.path(profile, workflow)
	if err != nil {
		return nil, time.Time{}, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, time.Time{}, fmt.Errorf("log of run %s of profile %s: %w", workflow, profile, ErrNotFound)
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read the log of run %s: %w", workflow, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, time.Time{}, fmt.Errorf("read the log of run %s: %w", workflow, err)
	}
	return f, st.ModTime(), nil
}

// Find returns the profiles that have a log of workflow, by name.
func (l *Logs) Find(workflow string) []string {
	var out []string
	for _, profile := range subdirs(l.dir) {
		if p, err := l.path(profile, workflow); err == nil {
			if _, err := os.Stat(p); err == nil {
				out = append(out, profile)
			}
		}
	}
	return out
}

// Prune removes the logs, and the partial logs of hosts that died, last
// written more than LogRetention before now.
func (l *Logs) Prune(now time.Time) error {
	var errs []error
	for _, profile := range subdirs(l.dir) {
		dir := filepath.Join(l.dir, profile)
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".jsonl") && !strings.HasSuffix(e.Name(), partialSuffix) {
				continue
			}
			info, err := e.Info()
			if err != nil || now.Sub(info.ModTime()) <= LogRetention {
				continue
			}
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove an expired run log: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// path is the log of workflow in profile. Names starting with "." are
// refused, as the logs being written are named so.
func (l *Logs) path(profile, workflow string) (string, error) {
	return namedPath("run log", l.dir, profile, workflow, ".jsonl", true)
}

// subdirs lists the directories in dir, by name.
func subdirs(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names
}
