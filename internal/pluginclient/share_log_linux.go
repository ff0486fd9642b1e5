package pluginclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// logPoll is how often a host looks for new lines in a shared plugin's log.
const logPoll = 200 * time.Millisecond

// logFollower copies into a host's log what a shared plugin writes to its
// own log while the host is connected, as go-plugin copies a plugin's
// stderr for Launch: its records with their levels and attributes (so
// progress reaches the user, and --debug shows the provider's log), and
// error lines for explaining a crash. The plugin serves other hosts too:
// their records come along.
type logFollower struct {
	stop    chan struct{}
	stopped sync.Once
	done    chan struct{}
}

// followLog follows the log at path from its end into log; nil when it
// cannot be read.
func followLog(path string, log *hostLogger) *logFollower {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil
	}
	lf := &logFollower{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(lf.done)
		defer f.Close()
		r := bufio.NewReader(f)
		var partial []byte
		copyLines := func() {
			for {
				line, err := r.ReadBytes('\n')
				partial = append(partial, line...)
				if err != nil {
					return // the rest of a line comes later
				}
				logRecord(log, partial)
				partial = partial[:0]
			}
		}
		t := time.NewTicker(logPoll)
		defer t.Stop()
		for {
			copyLines()
			select {
			case <-lf.stop:
				copyLines()
				return
			case <-t.C:
			}
		}
	}()
	return lf
}

// close copies what the log holds by now, then stops.
func (lf *logFollower) close() {
	if lf == nil {
		return
	}
	lf.stopped.Do(func() { close(lf.stop) })
	<-lf.done
}

// logRecord logs one line of a shared plugin's log: a record of NewLogger
// (JSON in go-plugin's shape), or a line the process wrote otherwise, at
// debug (a panic's at error). Records below what log shows are skipped
// before they are decoded.
func logRecord(log *hostLogger, line []byte) {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) == 0 {
		return
	}
	if line[0] != '{' {
		level := hclog.Debug
		if bytes.HasPrefix(line, []byte("panic: ")) || bytes.HasPrefix(line, []byte("fatal error: ")) {
			level = hclog.Error
		}
		log.Log(level, string(line))
		return
	}
	level := hclog.Info
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if bytes.Contains(line, []byte(`"@level":"`+l.String()+`"`)) {
			level = l
			break
		}
	}
	if level < hclog.Error && !log.l.Enabled(context.Background(), hclogToSlog(level)) {
		return
	}
	var rec map[string]any
	if json.Unmarshal(line, &rec) != nil {
		log.Log(hclog.Debug, string(line))
		return
	}
	msg, _ := rec["@message"].(string)
	var args []any
	for _, k := range slices.Sorted(maps.Keys(rec)) {
		if !strings.HasPrefix(k, "@") {
			args = append(args, k, rec[k])
		}
	}
	log.Log(level, msg, args...)
}

// hclogToSlog is the slog level of an hclog one.
func hclogToSlog(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Info:
		return slog.LevelInfo
	case hclog.Warn:
		return slog.LevelWarn
	}
	return slog.LevelError
}
