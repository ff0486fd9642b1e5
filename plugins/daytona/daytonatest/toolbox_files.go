package daytonatest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
)

// The toolbox's file transfers, as Daytona's daemon serves them
// (apps/daemon/pkg/toolbox/fs upload_files.go, download_files.go) and
// its SDKs use them for streams and many files: POST files/bulk-upload
// takes a multipart form of files[i].path and files[i].file parts and
// writes each file (parent directories made 0755, the file created or
// truncated); POST files/bulk-download takes {"paths": [...]} and answers
// a multipart form of one "file" part (with its Content-Length) or one
// "error" part (an ErrorResponse) per path, in order. The daemon does
// its file work inside the sandbox as the sandbox user; so does the
// fake, through one command per request (fsWriter, fsReader) that the
// handler streams the files through.

// fsWriter writes files read from stdin: per file "F LEN\n", the path
// (LEN bytes), then chunks "N\n" + N bytes, ended by "0\n"; it answers
// per file "ok BYTES\n" or "err MESSAGE\n". No single quotes: it runs
// as perl -e '...'.
const fsWriter = `use strict;
use File::Path qw(make_path);
use File::Basename qw(dirname);
binmode STDIN; binmode STDOUT; $| = 1;
sub rd { my $n = shift; my $b = ""; while (length($b) < $n) { my $r = read(STDIN, $b, $n - length($b), length($b)); die "short input\n" unless $r } return $b }
while (defined(my $l = <STDIN>)) {
  my ($len) = $l =~ /^F (\d+)\n\z/ or die "bad frame\n";
  my $path = rd($len);
  my ($fh, $err);
  my $d = dirname($path);
  if (!-d $d) { eval { make_path($d, { mode => 0755 }); 1 } or $err = "mkdir $d: $@" }
  if (!$err && !open($fh, ">:raw", $path)) { $err = "create: $!"; undef $fh }
  my $n = 0;
  while (1) {
    my $h = <STDIN>; defined $h or die "short input\n";
    my ($c) = $h =~ /^(\d+)\n\z/ or die "bad chunk\n";
    last if $c == 0;
    my $b = rd($c);
    if ($fh && !$err) { my $o = 0; while ($o < $c) { my $w = syswrite($fh, $b, $c - $o, $o); if (!defined $w) { $err = "write: $!"; last } $o += $w } }
    $n += $c;
  }
  if ($fh && !close($fh)) { $err ||= "close: $!" }
  $err =~ s/\n/ /g if $err;
  print $err ? "err $err\n" : "ok $n\n";
}`

// fsReader reads the files whose paths (NUL-terminated) come on stdin:
// per path "F SIZE\n" and SIZE bytes, or "E KIND MESSAGE\n" with KIND
// notfound, denied, dir or failed.
const fsReader = `use strict;
binmode STDIN; binmode STDOUT;
$/ = "\0";
while (defined(my $p = <STDIN>)) {
  chomp $p;
  my $fh;
  if (!open($fh, "<:raw", $p)) { my $k = $!{ENOENT} ? "notfound" : $!{EACCES} ? "denied" : "failed"; print "E $k $!\n"; next }
  if (-d $fh) { close $fh; print "E dir directory\n"; next }
  my $left = -s $fh;
  print "F $left\n";
  while ($left > 0) { my $r = sysread($fh, my $b, $left < 1048576 ? $left : 1048576); die "read $p: $!\n" unless $r; print $b; $left -= $r }
  close $fh;
}`

// fsChunk is the most the handler sends fsWriter at once.
const fsChunk = 1 << 20

// streamedRoutes are the toolbox routes whose bodies the fake streams
// instead of recording them (a file may be gigabytes).
var streamedRoutes = map[string]bool{
	"POST /toolbox/{id}/files/bulk-upload": true,
}

// toolboxBox is the started sandbox a toolbox request is for, counted as
// activity as Daytona's proxy counts it; nil (answered) when there is none.
func (f *Fake) toolboxBox(w http.ResponseWriter, r *http.Request) *sandbox {
	id := r.PathValue("id")
	f.mu.Lock()
	s, ok := f.boxes[id]
	started := ok && s.state == api.StateStarted
	if started {
		s.lastActivity = f.activityLocked()
	}
	f.mu.Unlock()
	if !started {
		writeToolboxError(w, r, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("sandbox %s not found or not started", id))
		return nil
	}
	return s
}

// bulkUpload answers POST /toolbox/{id}/files/bulk-upload: 200
// {"files": [{path, bytes}]}, or 400 {"errors": [...], "files": [...]}
// when a file could not be written (the others are).
func (f *Fake) bulkUpload(w http.ResponseWriter, r *http.Request) {
	s := f.toolboxBox(w, r)
	if s == nil {
		return
	}
	reader, err := r.MultipartReader()
	if err != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		writeJSON(w, http.StatusBadRequest, map[string]any{"errors": []string{"invalid multipart form"}})
		return
	}
	type fileResult struct {
		Path  string `json:"path"`
		Bytes int64  `json:"bytes"`
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ran := make(chan error, 1)
	go func() {
		st, err := f.backend.run(r.Context(), s, execRequest{cmd: "exec perl -e '" + fsWriter + "'", stdin: inR, stdout: outW, killable: true})
		if err == nil && st.code != 0 {
			err = fmt.Errorf("the sandbox's file writer exited %d", st.code)
		}
		_ = inR.CloseWithError(errors.New("the file writer ended"))
		_ = outW.CloseWithError(io.EOF)
		ran <- err
	}()
	// One answer line per file, in order, read as they come so that
	// the files stream without a round trip each.
	answered := make(chan []string, 1)
	go func() {
		var lines []string
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		answered <- lines
	}()
	var sent []string
	dests := map[string]string{}
	var errs []string
	files := []fileResult{}
	buf := make([]byte, fsChunk)
	for {
		part, err := reader.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("reading part: %v", err))
			break
		}
		name := part.FormName()
		idx := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(name, "files["), "].path"), "].file")
		switch {
		case strings.HasSuffix(name, ".path"):
			b, err := io.ReadAll(part)
			dest := strings.TrimSpace(string(b))
			switch {
			case err != nil:
				errs = append(errs, fmt.Sprintf("path[%s]: %v", idx, err))
			case dest == "":
				errs = append(errs, fmt.Sprintf("path[%s]: empty path", idx))
			default:
				dests[idx] = dest
			}
		case strings.HasSuffix(name, ".file"):
			dest, ok := dests[idx]
			if !ok {
				errs = append(errs, fmt.Sprintf("file[%s]: missing .path metadata", idx))
				continue
			}
			if err := sendFile(inW, dest, part, buf); err != nil {
				errs = append(errs, fmt.Sprintf("%s: write: %v", dest, err))
				continue
			}
			sent = append(sent, dest)
		}
	}
	_ = inW.Close()
	runErr := <-ran
	lines := <-answered
	for i, dest := range sent {
		switch {
		case i >= len(lines):
			errs = append(errs, fmt.Sprintf("%s: write: %v", dest, runErr))
		case strings.HasPrefix(lines[i], "ok "):
			n, _ := strconv.ParseInt(lines[i][3:], 10, 64)
			files = append(files, fileResult{Path: dest, Bytes: n})
		default:
			errs = append(errs, dest+": "+strings.TrimPrefix(lines[i], "err "))
		}
	}
	if runErr != nil && len(errs) == 0 {
		errs = append(errs, runErr.Error())
	}
	_, _ = io.Copy(io.Discard, r.Body)
	if len(errs) > 0 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"errors": errs, "files": files})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"files": files})
}

// sendFile frames one file for fsWriter.
func sendFile(w io.Writer, dest string, r io.Reader, buf []byte) error {
	if _, err := fmt.Fprintf(w, "F %d\n%s", len(dest), dest); err != nil {
		return err
	}
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := fmt.Fprintf(w, "%d\n", n); werr != nil {
				return werr
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			_, err = io.WriteString(w, "0\n")
			return err
		}
		if err != nil {
			return err
		}
	}
}

// downloadBoundary is the daemon's fixed multipart boundary.
const downloadBoundary = "DAYTONA-FILE-BOUNDARY"

// bulkDownload answers POST /toolbox/{id}/files/bulk-download.
func (f *Fake) bulkDownload(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Paths []string `json:"paths"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Paths) == 0 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": `request body must be {"paths": [ ... ]} and non-empty`})
		return
	}
	for _, p := range req.Paths {
		if strings.ContainsRune(p, 0) {
			writeToolboxError(w, r, http.StatusBadRequest, "INVALID_FILE_PATH", "invalid file path: NUL in path")
			return
		}
	}
	s := f.toolboxBox(w, r)
	if s == nil {
		return
	}
	var in strings.Builder
	for _, p := range req.Paths {
		in.WriteString(p)
		in.WriteByte(0)
	}
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		_, err := f.backend.run(ctx, s, execRequest{cmd: "exec perl -e '" + fsReader + "'", stdin: strings.NewReader(in.String()), stdout: outW, killable: true})
		_ = outW.CloseWithError(err)
		ran <- err
	}()
	defer func() { cancel(); _ = outR.Close(); <-ran }()
	w.Header().Set("Content-Type", "multipart/form-data; boundary="+downloadBoundary)
	w.WriteHeader(http.StatusOK)
	mw := multipart.NewWriter(w)
	_ = mw.SetBoundary(downloadBoundary)
	frames := bufio.NewReaderSize(outR, fsChunk)
	for _, p := range req.Paths {
		line, err := frames.ReadString('\n')
		if err != nil {
			return // cut short: the client sees a truncated response
		}
		line = strings.TrimSuffix(line, "\n")
		if size, ok := strings.CutPrefix(line, "F "); ok {
			n, err := strconv.ParseInt(size, 10, 64)
			if err != nil {
				return
			}
			ctype := mime.TypeByExtension(filepath.Ext(p))
			if ctype == "" {
				ctype = "application/octet-stream"
			}
			hdr := textproto.MIMEHeader{}
			hdr.Set("Content-Type", ctype)
			hdr.Set("Content-Disposition", partDisposition("file", p))
			hdr.Set("Content-Length", strconv.FormatInt(n, 10))
			part, err := mw.CreatePart(hdr)
			if err != nil {
				return
			}
			if c, err := io.Copy(part, io.LimitReader(frames, n)); err != nil || c != n {
				return
			}
			continue
		}
		kind, msg, _ := strings.Cut(strings.TrimPrefix(line, "E "), " ")
		status, code, text := http.StatusInternalServerError, "FILE_READ_FAILED", "failed to open file: "+msg
		switch kind {
		case "notfound":
			status, code, text = http.StatusNotFound, "FILE_NOT_FOUND", "file not found: "+p
		case "denied":
			status, code, text = http.StatusForbidden, "FILE_ACCESS_DENIED", "permission denied: "+p
		case "dir":
			status, code, text = http.StatusBadRequest, "INVALID_FILE_PATH", "invalid file path: path points to a directory: "+p
		}
		payload, _ := json.Marshal(api.ToolboxError{StatusCode: status, Message: text, Code: code, Timestamp: time.Now().UTC().Format(time.RFC3339), Path: p, Method: r.Method})
		hdr := textproto.MIMEHeader{}
		hdr.Set("Content-Type", "application/json; charset=utf-8")
		hdr.Set("Content-Disposition", partDisposition("error", p))
		part, err := mw.CreatePart(hdr)
		if err != nil {
			return
		}
		_, _ = part.Write(payload)
	}
	_ = mw.Close()
}

// partDisposition is the daemon's Content-Disposition of a part.
func partDisposition(form, path string) string {
	return fmt.Sprintf(`form-data; name=%q; filename=%q`, form, path)
}
