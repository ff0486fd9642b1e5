package worker

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/amelia-sandbox/amelia/core/workstep"
)

// The steps of a run on the sandbox's shared bare repository and in a
// workflow's checkout: git alone, no shell.

func stepRefs(ctx context.Context, r workstep.Refs, sio stepIO) error {
	release, err := lockWorkspace(ctx, r.Root)
	if err != nil {
		return err
	}
	defer release()
	if fi, err := os.Stat(r.Repo); err != nil || !fi.IsDir() {
		return nil
	}
	return git(ctx, sio, r.Repo, nil, "for-each-ref", "--format=%(objectname)")
}

func stepReceive(ctx context.Context, r workstep.Receive, sio stepIO) error {
	release, err := lockWorkspace(ctx, r.Root)
	if err != nil {
		return err
	}
	defer release()
	quiet := stepIO{stderr: sio.stderr}
	if fi, err := os.Stat(r.Repo); err != nil || !fi.IsDir() {
		if err := git(ctx, quiet, "", nil, "init", "--quiet", "--bare", r.Repo); err != nil {
			return err
		}
	}
	switch {
	case r.Bundle && r.Pack != nil:
		return fmt.Errorf("a bundle and a pack in one input")
	case r.Bundle:
		// Straight from the input: git reads the bundle's header, then
		// hands the rest to index-pack, so the pack is written once, into
		// the repo.
		if err := git(ctx, stepIO{stdin: sio.stdin, stderr: sio.stderr}, r.Repo, nil, "bundle", "unbundle", "/dev/stdin"); err != nil {
			return err
		}
	case r.Pack != nil:
		if err := receivePack(filepath.Join(r.Repo, "objects", "pack"), *r.Pack, sio.stdin); err != nil {
			return fmt.Errorf("store the pack: %w", err)
		}
	}
	for _, t := range r.Refs {
		if err := git(ctx, quiet, r.Repo, nil, "update-ref", t.Name, t.Oid); err != nil {
			return err
		}
	}
	return nil
}

func stepCommit(ctx context.Context, r workstep.Commit, sio stepIO) error {
	if !mine(r.Dir) {
		return fmt.Errorf("the checkout %s is not in the sandbox", r.Dir)
	}
	quiet := stepIO{stderr: sio.stderr}
	if err := git(ctx, quiet, r.Dir, nil, "add", "-A"); err != nil {
		return err
	}
	verdict := "clean"
	if err := git(ctx, quiet, r.Dir, nil, "diff", "--cached", "--quiet"); err != nil {
		if ctx.Err() != nil {
			return err
		}
		if err := git(ctx, quiet, r.Dir, r.Env, "-c", "commit.gpgsign=false", "commit", "--quiet", "--no-verify", "-m", r.Message); err != nil {
			return err
		}
		verdict = "committed"
	}
	if _, err := fmt.Fprintln(sio.stdout, verdict); err != nil {
		return err
	}
	exclude := filepath.Join(r.Dir, ".git", "info", "exclude")
	if fi, err := os.Stat(exclude); err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	for _, l := range []struct{ prefix, flag string }{{"ours ", "--exclude-from=" + exclude}, {"theirs ", "--exclude-per-directory=.gitignore"}} {
		if err := git(ctx, stepIO{stdout: &prefixWriter{w: sio.stdout, prefix: l.prefix}, stderr: sio.stderr}, r.Dir, nil,
			"ls-files", "--others", "--ignored", "--directory", "--no-empty-directory", l.flag); err != nil {
			return err
		}
	}
	return nil
}

// branchTip is the commit refs/heads/branch of the checkout dir is at,
// "" when there is no such branch.
func branchTip(ctx context.Context, sio stepIO, dir, branch string) string {
	out, err := gitOutput(ctx, stepIO{stderr: io.Discard}, dir, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch+"^{commit}")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

func stepHasWork(ctx context.Context, r workstep.HasWork, sio stepIO) error {
	verdict := "none"
	if mine(r.Dir) {
		if tip := branchTip(ctx, sio, r.Dir, r.Branch); tip != "" && tip != r.Base {
			verdict = "work"
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	_, err := fmt.Fprintln(sio.stdout, verdict)
	return err
}

func stepBundle(ctx context.Context, r workstep.Bundle, sio stepIO) error {
	if !mine(r.Dir) {
		return &stepExit{workstep.ExitRefused, "the checkout " + r.Dir + " is not in the sandbox"}
	}
	tip := branchTip(ctx, sio, r.Dir, r.Branch)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case tip == "":
		return &stepExit{workstep.ExitRefused, "branch " + r.Branch + " not found in the sandbox"}
	case tip == r.Base:
		return &stepExit{workstep.ExitUnmade, "no-changes"}
	}
	return git(ctx, stepIO{stdout: sio.stdout, stderr: sio.stderr}, r.Dir, nil, "bundle", "create", "-", "refs/heads/"+r.Branch, "^"+r.Base)
}

// prefixWriter writes each line it is given with prefix before it.
type prefixWriter struct {
	w      io.Writer
	prefix string
	mid    bool // within a line
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	bw := bufio.NewWriter(p.w)
	for _, c := range b {
		if !p.mid {
			bw.WriteString(p.prefix)
			p.mid = true
		}
		bw.WriteByte(c)
		if c == '\n' {
			p.mid = false
		}
	}
	return len(b), bw.Flush()
}
