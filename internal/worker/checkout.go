package worker

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// A workflow's checkout may be reused by a later workflow of the same uid
// (core/workspace parks it when its run ends). That later workflow must
// inherit nothing of the earlier run, which owned every file and could
// have changed any of them, forged the index's stat data to hide it, or
// let another uid hold a descriptor into the tree. What it cannot forge
// is a change time: the kernel sets an inode's ctime to the current time
// on every change to it (a write, chmod, chown, link, rename), and no
// unprivileged process can set it back.
//
// So right after a checkout amelia made itself (trusted: no process of
// the earlier run is alive, the tree was written into a new 0700
// directory with umask 077), `checkout stamp` records a stamp, a ctime no
// later change can have or undercut, and the inode of every directory.
// The host keeps them where the uid cannot write. At reuse, `checkout
// reuse` keeps exactly the entries whose inode is unchanged since the
// stamp, at a path it can prove they had then, and removes everything
// else; the index it writes for what it kept holds the blob ids of the
// commit the tree was made at (from the shared bare repository, not the
// checkout) and the stat data those files have now. git then writes only
// what the new base changes, and what was removed.
//
// A kept file or symbolic link has ctime at or before the stamp, one
// link, the checkout's uid, and the type and executable bit of its blob:
// unchanged since amelia wrote it, never made readable or writable by
// another uid (that would have been a chmod), and not moved (a rename
// changes the ctime too). A directory is kept when it has the uid and
// mode 0700 and either has not changed since the stamp or is the very
// inode the stamp recorded at its path (its entries changed); a
// directory that changed is then replaced by a new one holding what was
// kept of it, so that no descriptor another uid may hold to it leads into
// the new run's checkout. Everything else is removed: untracked and
// ignored files, files without permissions (their directories are made
// writable first), links in place of directories (never followed),
// nested .git directories, devices and pipes. An entry that cannot be
// removed (another uid's directory with contents) fails the reuse, and
// the caller makes a new checkout instead. The top's .git is removed
// whole: the caller makes it again.

// checkoutCmd groups stamp and reuse.
func (w *worker) checkoutCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "checkout",
		Short: "Stamp a checkout amelia made, or make a stamped checkout fit for reuse",
	}
	cmd.AddCommand(w.checkoutStampCmd(), w.checkoutReuseCmd())
	return cmd
}

func (w *worker) checkoutStampCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "stamp DIR",
		Short: "Print the stamp of the checkout DIR just made: a ctime no later change can have, and its directories' inodes",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := stampCheckout(args[0], w.p.Stdout); err != nil {
				fmt.Fprintf(w.p.Stderr, "amelia-worker checkout stamp: %v\n", err)
				return exitCode(exitFailed)
			}
			return nil
		},
	}
}

func (w *worker) checkoutReuseCmd() *cobra.Command {
	var repo, start, into string
	cmd := &cobra.Command{
		Use:   "reuse --repo BARE --start COMMIT --into NEW DIR < STAMP",
		Short: "Keep of the checkout DIR what is unchanged since its stamp, moved into the new directory NEW, with an index for it",
		Long: `Read the stamp (checkout stamp's output) of the checkout DIR, made at
COMMIT of the bare repository BARE, from stdin. Make NEW (mode 0700), move
into it what DIR holds unchanged since the stamp, remove everything else
and DIR itself, and write NEW/.git/index for what was kept. On stdout,
"kept N removed M".`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			stamp, err := readStamp(w.p.Stdin)
			if err == nil {
				var kept, removed int
				kept, removed, err = reuseCheckout(args[0], into, repo, start, stamp)
				if err == nil {
					_, err = fmt.Fprintf(w.p.Stdout, "kept %d removed %d\n", kept, removed)
					return err
				}
			}
			fmt.Fprintf(w.p.Stderr, "amelia-worker checkout reuse: %v\n", err)
			return exitCode(exitFailed)
		},
	}
	cmd.Flags().StringVar(&repo, "repo", "", "the bare repository holding COMMIT (required)")
	cmd.Flags().StringVar(&start, "start", "", "the commit the checkout was made at (required)")
	cmd.Flags().StringVar(&into, "into", "", "the new directory to make (required)")
	for _, f := range []string{"repo", "start", "into"} {
		cmd.MarkFlagRequired(f)
	}
	return cmd
}

// stamp is what checkout stamp recorded of a checkout.
type stamp struct {
	sec, nsec int64
	dirs      map[string]uint64 // directory (relative, "." the top) → inode
}

// after reports whether a ctime is later than the stamp.
func (s stamp) after(t unix.Timespec) bool {
	return t.Sec > s.sec || t.Sec == s.sec && t.Nsec > s.nsec
}

// stampCheckout writes the stamp of dir to out: "stamp SEC NSEC\n", then
// "INODE PATH\x00" for every directory but .git's, the top as ".". The
// stamp is the ctime of a file made after the checkout, once a change
// made after it gets a later ctime: the kernel's file times tick coarsely,
// so it waits for the tick (a change made in the stamp's own tick could
// otherwise carry the stamp's time).
func stampCheckout(dir string, out io.Writer) error {
	dir = path.Clean(dir)
	gitDir := path.Join(dir, ".git")
	probe := func(name string) (unix.Timespec, error) {
		p := path.Join(gitDir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			return unix.Timespec{}, err
		}
		defer os.Remove(p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return unix.Timespec{}, err
		}
		return st.Ctim, nil
	}
	t, err := probe("amelia-stamp")
	if err != nil {
		return fmt.Errorf("stamp %s: %w", dir, err)
	}
	s := stamp{sec: t.Sec, nsec: t.Nsec}
	for {
		later, err := probe("amelia-tick")
		if err != nil {
			return fmt.Errorf("stamp %s: %w", dir, err)
		}
		if s.after(later) {
			break
		}
		// Yield: the tick comes with the next timer interrupt.
		unix.Nanosleep(&unix.Timespec{Nsec: 100_000}, nil)
	}
	bw := bufio.NewWriter(out)
	fmt.Fprintf(bw, "stamp %d %d\n", s.sec, s.nsec)
	var top unix.Stat_t
	if err := unix.Lstat(dir, &top); err != nil {
		return fmt.Errorf("stamp %s: %w", dir, err)
	}
	fmt.Fprintf(bw, "%d .\x00", top.Ino)
	// The directories are the tree's, which git lists without reading
	// the filesystem: right after a checkout there are no others.
	sc := &scanned{st: map[string]unix.Stat_t{}}
	if dirs, err := treeDirs(dir); err == nil {
		at := openAt(dir)
		defer at.close()
		var wg sync.WaitGroup
		sem := make(chan struct{}, scanWorkers)
		for _, d := range dirs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				var fi unix.Stat_t
				if p := path.Join(dir, d); at.lstat(p, &fi) == nil && fi.Mode&unix.S_IFMT == unix.S_IFDIR {
					sc.put(p, fi)
				}
			}()
		}
		wg.Wait()
	} else {
		sc = scan(dir, false)
	}
	paths := make([]string, 0, len(sc.st))
	for p := range sc.st {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		fmt.Fprintf(bw, "%d %s\x00", sc.st[p].Ino, strings.TrimPrefix(p, dir+"/"))
	}
	return bw.Flush()
}

// scanWorkers is how many entries scan looks at at once: on a filesystem
// that answers each lstat slowly (docker's fuse-overlayfs) the walk of a
// large tree waits on round trips, not on a core.
const scanWorkers = 32

// dirAt looks up paths below the directory dir from a descriptor of it
// (fstatat, openat), not from /: in a docker container whose root is
// fuse-overlayfs, a lookup from / asks the FUSE daemon about the first
// component (the workdir volume's mount point) each time, ~20 µs, which
// made the lstat of a 48,000-entry checkout on the volume take 1-1.9 s
// where the same lookups from the checkout took 0.1 s.
type dirAt struct {
	dir string
	fd  int // unix.AT_FDCWD where dir could not be opened: paths as given
}

// openAt opens dir (never through a link) for lookups below it; where it
// cannot, lookups go by the paths themselves.
func openAt(dir string) *dirAt {
	dir = path.Clean(dir)
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &dirAt{dir: dir, fd: unix.AT_FDCWD}
	}
	return &dirAt{dir: dir, fd: fd}
}

func (a *dirAt) close() {
	if a.fd != unix.AT_FDCWD {
		unix.Close(a.fd)
	}
}

// rel is p (a path at or below a.dir) as the lookup from a.fd takes it.
func (a *dirAt) rel(p string) string {
	if a.fd == unix.AT_FDCWD {
		return p
	}
	if p == a.dir {
		return "."
	}
	if r, ok := strings.CutPrefix(p, a.dir+"/"); ok {
		return r
	}
	return p // absolute: fstatat and openat ignore the descriptor
}

// lstat is unix.Lstat of p.
func (a *dirAt) lstat(p string, st *unix.Stat_t) error {
	return unix.Fstatat(a.fd, a.rel(p), st, unix.AT_SYMLINK_NOFOLLOW)
}

// readDir is os.ReadDir of the directory p, never through a link.
func (a *dirAt) readDir(p string) ([]os.DirEntry, error) {
	fd, err := unix.Openat(a.fd, a.rel(p), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	ents, err := f.ReadDir(-1)
	slices.SortFunc(ents, func(x, y os.DirEntry) int { return strings.Compare(x.Name(), y.Name()) })
	return ents, err
}

// scanned is what scan found below a directory, by path.
type scanned struct {
	mu   sync.Mutex
	st   map[string]unix.Stat_t // every entry, not following links (files only with files)
	ents map[string][]string    // every directory read: its entries' names
}

// scan reads every directory below dir (not into the top's .git, never
// through a link) and lstats its directories, and with files its other
// entries too, scanWorkers at a time. A directory it cannot read is left
// out: the caller reads it again, and fails or removes it.
func scan(dir string, files bool) *scanned {
	s := &scanned{st: map[string]unix.Stat_t{}, ents: map[string][]string{}}
	at := openAt(dir)
	defer at.close()
	var wg sync.WaitGroup
	sem := make(chan struct{}, scanWorkers)
	var visit func(p string, top bool)
	visit = func(p string, top bool) {
		defer wg.Done()
		sem <- struct{}{}
		ents, err := at.readDir(p)
		<-sem
		if err != nil {
			return
		}
		names := make([]string, 0, len(ents))
		for _, e := range ents {
			if top && e.Name() == ".git" {
				continue
			}
			names = append(names, e.Name())
			c := path.Join(p, e.Name())
			if e.IsDir() {
				wg.Add(1)
				go func() {
					var st unix.Stat_t
					sem <- struct{}{}
					err := at.lstat(c, &st)
					<-sem
					if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
						s.put(c, st)
						wg.Add(1)
						go visit(c, false)
					}
					wg.Done()
				}()
			} else if files {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var st unix.Stat_t
					sem <- struct{}{}
					err := at.lstat(c, &st)
					<-sem
					if err == nil {
						s.put(c, st)
					}
				}()
			}
		}
		s.mu.Lock()
		s.ents[p] = names
		s.mu.Unlock()
	}
	wg.Add(1)
	visit(dir, true)
	wg.Wait()
	return s
}

// scanTree is scan for a stamped checkout of a known tree: a directory
// of the tree unchanged since the stamp holds exactly the entries it had
// then, the tree's (a checkout holds nothing else), so only the top and
// directories that changed are read; every directory of the tree and
// every entry is lstat'ed, scanWorkers at a time.
func scanTree(dir string, dirs map[string]bool, children map[string][]string, st stamp) *scanned {
	s := &scanned{st: map[string]unix.Stat_t{}, ents: map[string][]string{}}
	at := openAt(dir)
	defer at.close()
	abs := func(rel string) string { return path.Join(dir, rel) }
	par := func(items []string, fn func(string)) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, scanWorkers)
		for _, it := range items {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				fn(it)
				<-sem
			}()
		}
		wg.Wait()
	}
	lstat := func(p string) {
		var fi unix.Stat_t
		if at.lstat(p, &fi) == nil {
			s.put(p, fi)
		}
	}
	rels := make([]string, 0, len(dirs))
	for d := range dirs {
		rels = append(rels, d)
	}
	par(rels, func(rel string) { lstat(abs(rel)) })
	var changed []string
	for _, rel := range rels {
		fi, ok := s.st[abs(rel)]
		switch {
		case !ok || fi.Mode&unix.S_IFMT != unix.S_IFDIR:
		case rel == "." || st.after(fi.Ctim):
			changed = append(changed, rel)
		default:
			s.ents[abs(rel)] = children[rel]
		}
	}
	par(changed, func(rel string) {
		ents, err := at.readDir(abs(rel))
		if err != nil {
			return
		}
		names := make([]string, 0, len(ents))
		for _, e := range ents {
			if rel == "." && e.Name() == ".git" {
				continue
			}
			names = append(names, e.Name())
		}
		s.mu.Lock()
		s.ents[abs(rel)] = names
		s.mu.Unlock()
	})
	var entries []string
	for d, names := range s.ents {
		for _, n := range names {
			if c := path.Join(d, n); !dirs[strings.TrimPrefix(c, dir+"/")] {
				entries = append(entries, c)
			}
		}
	}
	par(entries, lstat)
	return s
}

func (s *scanned) put(p string, st unix.Stat_t) {
	s.mu.Lock()
	s.st[p] = st
	s.mu.Unlock()
}

// lstat is what scan found of p, else unix.Lstat.
func (s *scanned) lstat(p string, st *unix.Stat_t) error {
	if s != nil {
		if got, ok := s.st[p]; ok {
			*st = got
			return nil
		}
	}
	return unix.Lstat(p, st)
}

// readDir is the names scan read in the directory p, else os.ReadDir's.
func (s *scanned) readDir(p string) ([]string, error) {
	if s != nil {
		if names, ok := s.ents[p]; ok {
			return names, nil
		}
	}
	ents, err := os.ReadDir(p)
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, err
}

// treeDirs lists the directories of the tree HEAD of the checkout dir
// has checked out.
func treeDirs(dir string) ([]string, error) {
	cmd := exec.Command("git", "--git-dir="+path.Join(dir, ".git"), "-c", "core.hooksPath=/dev/null", "ls-tree", "-r", "-d", "-z", "--name-only", "HEAD")
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for d := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs, nil
}

// readStamp reads what stampCheckout wrote.
func readStamp(r io.Reader) (stamp, error) {
	br := bufio.NewReader(r)
	head, err := br.ReadString('\n')
	f := strings.Fields(head)
	if err != nil || len(f) != 3 || f[0] != "stamp" {
		return stamp{}, fmt.Errorf("read the stamp: its first line is %q, not stamp SEC NSEC", head)
	}
	s := stamp{dirs: map[string]uint64{}}
	if s.sec, err = strconv.ParseInt(f[1], 10, 64); err == nil {
		s.nsec, err = strconv.ParseInt(f[2], 10, 64)
	}
	if err != nil {
		return stamp{}, fmt.Errorf("read the stamp: %w", err)
	}
	for {
		rec, err := br.ReadString(0)
		if errors.Is(err, io.EOF) && rec == "" {
			return s, nil
		}
		if err != nil {
			return stamp{}, fmt.Errorf("read the stamp: %w", err)
		}
		ino, p, ok := strings.Cut(strings.TrimSuffix(rec, "\x00"), " ")
		n, err := strconv.ParseUint(ino, 10, 64)
		if !ok || err != nil {
			return stamp{}, fmt.Errorf("read the stamp: bad record %q", rec)
		}
		s.dirs[p] = n
	}
}

// treeEntry is a path of the commit a checkout was made at.
type treeEntry struct {
	mode uint32 // 0100644, 0100755, 0120000, 0160000
	oid  []byte
}

// lsTree lists commit's files in the bare repository repo, its
// directories ("." the top), and each directory's entries' names.
func lsTree(repo, commit string) (map[string]treeEntry, map[string]bool, map[string][]string, error) {
	cmd := exec.Command("git", "--git-dir="+repo, "-c", "core.hooksPath=/dev/null", "ls-tree", "-r", "-z", "--full-tree", "--end-of-options", commit)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("list the files of %s: %v: %s", commit, err, strings.TrimSpace(stderr.String()))
	}
	files, dirs, children := map[string]treeEntry{}, map[string]bool{".": true}, map[string][]string{}
	for rec := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		meta, p, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 {
			return nil, nil, nil, fmt.Errorf("list the files of %s: bad line %q", commit, rec)
		}
		mode, err1 := strconv.ParseUint(f[0], 8, 32)
		oid, err2 := hex.DecodeString(f[2])
		if err1 != nil || err2 != nil || len(oid) != sha1.Size {
			return nil, nil, nil, fmt.Errorf("list the files of %s: bad line %q (only SHA-1 repositories are reused)", commit, rec)
		}
		files[p] = treeEntry{uint32(mode), oid}
		children[path.Dir(p)] = append(children[path.Dir(p)], path.Base(p))
		for d := path.Dir(p); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			children[path.Dir(d)] = append(children[path.Dir(d)], path.Base(d))
		}
	}
	return files, dirs, children, nil
}

// reuse is one reuseCheckout in progress.
type reuse struct {
	from, into string
	uid        uint32
	stamp      stamp
	sc         *scanned // what was there once .git was gone
	files      map[string]treeEntry
	dirs       map[string]bool
	kept       []indexEntry
	removed    int
}

// reuseCheckout makes into from what dir holds unchanged since st (see
// the top of this file) and returns how many files it kept and how many
// entries it removed.
func reuseCheckout(dir, into, repo, start string, st stamp) (int, int, error) {
	dir, into = path.Clean(dir), path.Clean(into)
	var top unix.Stat_t
	if err := unix.Lstat(dir, &top); err != nil {
		return 0, 0, fmt.Errorf("reuse %s: %w", dir, err)
	}
	me := uint32(os.Geteuid())
	if top.Mode&unix.S_IFMT != unix.S_IFDIR || top.Uid != me || st.dirs["."] != top.Ino {
		return 0, 0, fmt.Errorf("reuse %s: not the stamped directory of uid %d", dir, me)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return 0, 0, fmt.Errorf("reuse %s: %w", dir, err)
	}
	files, dirs, children, err := lsTree(repo, start)
	if err != nil {
		return 0, 0, fmt.Errorf("reuse %s: %w", dir, err)
	}
	r := &reuse{from: dir, into: into, uid: me, stamp: st, files: files, dirs: dirs}
	if err := removeAll(path.Join(dir, ".git")); err != nil {
		return 0, 0, fmt.Errorf("reuse %s: remove its .git: %w", dir, err)
	}
	if err := os.Mkdir(into, 0o700); err != nil {
		return 0, 0, fmt.Errorf("reuse %s: %w", dir, err)
	}
	r.sc = scanTree(dir, dirs, children, st)
	if err := r.sift(".", dir, into); err != nil {
		return 0, 0, fmt.Errorf("reuse %s: %w", dir, err)
	}
	if err := os.Remove(dir); err != nil {
		return 0, 0, fmt.Errorf("reuse %s: %w", dir, err)
	}
	if err := os.Mkdir(path.Join(into, ".git"), 0o700); err != nil {
		return 0, 0, fmt.Errorf("reuse %s: %w", dir, err)
	}
	if err := writeIndex(path.Join(into, ".git", "index"), r.kept); err != nil {
		return 0, 0, fmt.Errorf("reuse %s: %w", dir, err)
	}
	return len(r.kept), r.removed, nil
}

// sift moves what the directory old (at rel in the tree) holds that may
// be kept into the new directory new, recursing into directories: one
// unchanged since the stamp is moved whole once sifted, one that changed
// is replaced by a new one. What is not kept is removed; old ends empty.
func (r *reuse) sift(rel, old, new string) error {
	names, err := r.sc.readDir(old)
	if err != nil {
		return err
	}
	for _, name := range names {
		crel, cold := path.Join(rel, name), path.Join(old, name)
		if rel == "." && name == ".git" {
			if err := removeAll(cold); err != nil { // made again meanwhile: it cannot be
				return err
			}
			r.removed++
			continue
		}
		var st unix.Stat_t
		if err := r.sc.lstat(cold, &st); err != nil {
			return err
		}
		keepAs := func() bool {
			if st.Uid != r.uid || r.stamp.after(st.Ctim) {
				return false
			}
			te, ok := r.files[crel]
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				exe := st.Mode&0o100 != 0
				perm := st.Mode & 0o777
				return ok && st.Nlink == 1 && (te.mode == 0o100644 && !exe && perm == 0o600 || te.mode == 0o100755 && exe && perm == 0o700)
			case unix.S_IFLNK:
				return ok && te.mode == 0o120000
			}
			return false
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Uid == r.uid && st.Mode&0o7777 == 0o700 && r.dirs[crel] && r.files[crel].mode == 0 &&
			(!r.stamp.after(st.Ctim) || r.stamp.dirs[crel] == st.Ino) {
			if !r.stamp.after(st.Ctim) {
				// Unchanged: its entries are as they were, but for what
				// changed below it; sift in place, then move it whole.
				if err := r.siftInPlace(crel, cold); err != nil {
					return err
				}
				if err := os.Rename(cold, path.Join(new, name)); err != nil {
					return err
				}
				continue
			}
			cnew := path.Join(new, name)
			if err := os.Mkdir(cnew, 0o700); err != nil {
				return err
			}
			if err := r.sift(crel, cold, cnew); err != nil {
				return err
			}
			if err := os.Remove(cold); err != nil {
				return err
			}
			continue
		}
		if keepAs() {
			if err := r.keep(crel, cold, path.Join(new, name)); err != nil {
				return err
			}
			continue
		}
		if err := removeAll(cold); err != nil {
			return err
		}
		r.removed++
	}
	return nil
}

// siftInPlace is sift for a directory unchanged since the stamp: its own
// entries are the ones it had, so kept files stay where they are (their
// ctime stays too); subdirectories are sifted as sift would.
func (r *reuse) siftInPlace(rel, dir string) error {
	names, err := r.sc.readDir(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		crel, c := path.Join(rel, name), path.Join(dir, name)
		var st unix.Stat_t
		if err := r.sc.lstat(c, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			// Unchanged directories hold only what they held at the
			// stamp: a directory of the tree, or removed.
			if st.Uid == r.uid && st.Mode&0o7777 == 0o700 && r.dirs[crel] && r.files[crel].mode == 0 &&
				(!r.stamp.after(st.Ctim) || r.stamp.dirs[crel] == st.Ino) {
				if !r.stamp.after(st.Ctim) {
					if err := r.siftInPlace(crel, c); err != nil {
						return err
					}
					continue
				}
				// Changed below an unchanged parent: replaced in place.
				tmp := path.Join(dir, ".amelia-new-"+name)
				if err := os.Mkdir(tmp, 0o700); err != nil {
					return err
				}
				if err := r.sift(crel, c, tmp); err != nil {
					return err
				}
				if err := os.Remove(c); err != nil {
					return err
				}
				if err := os.Rename(tmp, c); err != nil {
					return err
				}
				continue
			}
		} else if st.Uid == r.uid && !r.stamp.after(st.Ctim) {
			te, ok := r.files[crel]
			exe, perm := st.Mode&0o100 != 0, st.Mode&0o777
			if ok && (st.Mode&unix.S_IFMT == unix.S_IFLNK && te.mode == 0o120000 ||
				st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1 && (te.mode == 0o100644 && !exe && perm == 0o600 || te.mode == 0o100755 && exe && perm == 0o700)) {
				r.kept = append(r.kept, indexEntry{path: crel, st: st, mode: te.mode, oid: te.oid})
				continue
			}
		}
		if err := removeAll(c); err != nil {
			return err
		}
		r.removed++
	}
	return nil
}

// keep moves the kept file old to new and records it for the index, with
// its stat data after the move.
func (r *reuse) keep(rel, old, new string) error {
	if err := os.Rename(old, new); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(new, &st); err != nil {
		return err
	}
	te := r.files[rel]
	r.kept = append(r.kept, indexEntry{path: rel, st: st, mode: te.mode, oid: te.oid})
	return nil
}

// removeAll removes p, never following a link, first making the
// directories below it that this user owns writable and searchable.
func removeAll(p string) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return os.Remove(p)
	}
	if st.Mode&0o700 != 0o700 {
		if err := unix.Chmod(p, st.Mode&0o7777|0o700); err != nil {
			return err
		}
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := removeAll(path.Join(p, e.Name())); err != nil {
			return err
		}
	}
	return os.Remove(p)
}

// indexEntry is a file kept for the index: its path, its stat data now,
// and its blob.
type indexEntry struct {
	path string
	st   unix.Stat_t
	mode uint32
	oid  []byte
}

// writeIndex writes a git index (version 2) of entries to file: git takes
// a file whose stat data matches its entry as holding the entry's blob,
// and reads the others.
func writeIndex(file string, entries []indexEntry) error {
	slices.SortFunc(entries, func(a, b indexEntry) int { return strings.Compare(a.path, b.path) })
	var buf bytes.Buffer
	buf.WriteString("DIRC")
	be := func(v uint32) { binary.Write(&buf, binary.BigEndian, v) }
	be(2)
	be(uint32(len(entries)))
	for _, e := range entries {
		start := buf.Len()
		for _, v := range []int64{e.st.Ctim.Sec, e.st.Ctim.Nsec, e.st.Mtim.Sec, e.st.Mtim.Nsec} {
			be(uint32(v))
		}
		be(uint32(e.st.Dev))
		be(uint32(e.st.Ino))
		be(e.mode)
		be(e.st.Uid)
		be(e.st.Gid)
		be(uint32(e.st.Size))
		buf.Write(e.oid)
		binary.Write(&buf, binary.BigEndian, uint16(min(len(e.path), 0xfff)))
		buf.WriteString(e.path)
		n := buf.Len() - start
		buf.Write(make([]byte, (n+8)&^7-n))
	}
	sum := sha1.Sum(buf.Bytes())
	buf.Write(sum[:])
	return os.WriteFile(file, buf.Bytes(), 0o600)
}
