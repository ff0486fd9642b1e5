package worker

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// exitClaimRefused is claim's exit when the target is a directory of the
// user who runs it, which claim leaves as it is.
const exitClaimRefused = 3

// claimAttempts bounds claim's tries at a target that another uid keeps
// making and removing.
const claimAttempts = 100

// claimCmd moves a workflow's new checkout into place, for core's
// workspace: a run's uid makes it under a name nobody else knows in a
// sticky directory (worktrees/, mode 1733) that the user running claim
// owns, and claim, run by that owner under the repository lock, gives it
// its workflow's name. Only the directory's owner may move what another
// uid made there, and shell mv cannot do it atomically.
func (w *worker) claimCmd() *cobra.Command {
	var owner int
	cmd := &cobra.Command{
		Use:   "claim --owner UID DIR FROM TO",
		Short: "Rename the directory FROM of uid UID to TO in DIR, a directory of this user's, moving aside what another uid put at TO",
		Long: `Rename FROM to TO in DIR, which this user must own. FROM must be a directory
(not a link) of uid UID. Whatever another uid has at TO (a directory, a
file, a link, which is never followed) is exchanged with FROM atomically
(renameat2 RENAME_EXCHANGE), so it ends at FROM: nothing is deleted, and no
other uid can slip anything in between. On stdout, "aside UID" when that
happened. Exit 3, and nothing moved, when TO is a directory of this user's.
A file of this user's at TO can only be another uid's hard link to it: it
is moved out of the way too, and that name of it removed.`,
		Args: cobra.ExactArgs(3),
		RunE: func(_ *cobra.Command, args []string) error {
			dir, from, to := args[0], args[1], args[2]
			for _, name := range []string{from, to} {
				if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
					return fmt.Errorf("claim: %q is not a name in a directory: give FROM and TO without a slash", name)
				}
			}
			if from == to || owner < 0 {
				return fmt.Errorf("claim: want FROM and TO different and --owner a uid")
			}
			aside, err := claim(dir, owner, from, to)
			if err != nil {
				fmt.Fprintf(w.p.Stderr, "amelia-worker claim: %v\n", err)
				if _, ok := errors.AsType[claimRefused](err); ok {
					return exitCode(exitClaimRefused)
				}
				return exitCode(exitFailed)
			}
			if aside >= 0 {
				_, err = fmt.Fprintf(w.p.Stdout, "aside %d\n", aside)
			}
			return err
		},
	}
	cmd.Flags().IntVar(&owner, "owner", -1, "the uid FROM must belong to (required)")
	cmd.MarkFlagRequired("owner")
	return cmd
}

// claimRefused: TO is a directory of this user's.
type claimRefused struct{ error }

// claim renames from to to in dir (see claimCmd) and returns the uid of
// what it moved aside to from, or -1.
func claim(dir string, owner int, from, to string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	me := os.Geteuid()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return -1, fmt.Errorf("stat %s: %w", dir, err)
	}
	if int(st.Uid) != me {
		return -1, fmt.Errorf("%s belongs to uid %d, not to this user (%d): only its owner may move what other uids made in it", dir, st.Uid, me)
	}
	var src unix.Stat_t
	if err := unix.Fstatat(fd, from, &src, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return -1, fmt.Errorf("stat %s/%s: %w", dir, from, err)
	}
	if src.Mode&unix.S_IFMT != unix.S_IFDIR || int(src.Uid) != owner {
		return -1, fmt.Errorf("%s/%s is not a directory of uid %d", dir, from, owner)
	}
	for range claimAttempts {
		err := unix.Renameat2(fd, from, fd, to, unix.RENAME_NOREPLACE)
		if err == nil {
			return -1, placed(fd, dir, to, &src)
		}
		if !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("rename %s to %s in %s: %w", from, to, dir, err)
		}
		var cur unix.Stat_t
		if err := unix.Fstatat(fd, to, &cur, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
			continue // gone meanwhile
		} else if err != nil {
			return -1, fmt.Errorf("stat %s/%s: %w", dir, to, err)
		}
		mine := int(cur.Uid) == me
		if mine && cur.Mode&unix.S_IFMT == unix.S_IFDIR {
			return -1, claimRefused{fmt.Errorf("%s/%s is a directory of this user's (uid %d): left as it is", dir, to, me)}
		}
		err = unix.Renameat2(fd, from, fd, to, unix.RENAME_EXCHANGE)
		switch {
		case errors.Is(err, unix.ENOENT):
			continue // gone meanwhile
		case err != nil:
			return -1, fmt.Errorf("exchange %s and %s in %s: %w", from, to, dir, err)
		case !mine:
			return int(cur.Uid), placed(fd, dir, to, &src)
		}
		// Not a directory (unlinkat refuses one): a name another uid gave
		// a file of this user's.
		if err := unix.Unlinkat(fd, from, 0); err != nil {
			return -1, fmt.Errorf("remove the link another uid made at %s/%s, now %s: %w", dir, to, from, err)
		}
		return -1, placed(fd, dir, to, &src)
	}
	return -1, fmt.Errorf("%s/%s appeared and vanished %d times while it was claimed: another uid is racing for it; try again", dir, to, claimAttempts)
}

// placed checks that to in dir is now the directory src described.
func placed(fd int, dir, to string, src *unix.Stat_t) error {
	var st unix.Stat_t
	if err := unix.Fstatat(fd, to, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stat %s/%s: %w", dir, to, err)
	}
	if st.Dev != src.Dev || st.Ino != src.Ino {
		return fmt.Errorf("%s/%s is not the directory claimed: it changed while it was renamed", dir, to)
	}
	return nil
}
