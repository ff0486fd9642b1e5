package run

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/amelia-sandbox/amelia/core/runstore"
	"github.com/amelia-sandbox/amelia/core/workspace"
	"github.com/amelia-sandbox/amelia/proxy"
)

// ErrRefused matches the errors of a run refused before anything started:
// a bad workflow id, a branch that exists, a dirty checkout, a repository
// that is not one, a key that is not set, a profile its provider refuses
// (whatever stops the check phase). Nothing was created and nothing needs
// cleaning.
var ErrRefused = errors.New("refused")

type refusal struct{ error }

func (refusal) Is(target error) bool { return target == ErrRefused }

// Unwrap is why: errors.As finds a *config.ValidationError in it.
func (r refusal) Unwrap() error { return r.error }

func refuse(err error) error { return refusal{err} }

// source is the repository a run works on, as checked before the run.
type source struct {
	workflow string
	// local is the host checkout, or nil for a URL.
	local *workspace.HostRepo
	// url is the repository's URL, or "" for a local checkout.
	url string
	// base is the base branch; "" for a URL means its default branch.
	base string
	// commit is the commit of base a local checkout's run starts from.
	commit string
}

// repo is the host checkout's directory or the URL.
func (s source) repo() string {
	if s.local != nil {
		return s.local.Dir
	}
	return s.url
}

// scpLike matches git's scp-like syntax, user@host:path.
var scpLike = regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:`)

// isURL reports whether repo names a remote repository rather than a path.
func isURL(repo string) bool {
	return strings.Contains(repo, "://") || scpLike.MatchString(repo)
}

// check refuses, before anything starts, what would fail later or lose
// work: a bad or taken workflow id, a repository that is not one, a dirty
// checkout, a URL without --push (its result would have nowhere to go).
func (r *runner) check(ctx context.Context) (source, error) {
	req := r.req
	src := source{workflow: req.Workflow, base: req.Base}
	if err := checkPrompt(req.Prompt); err != nil {
		return src, refuse(err)
	}
	if src.workflow == "" {
		src.workflow = workspace.NewWorkflowID(req.Prompt)
	}
	if err := workspace.ValidateWorkflowID(src.workflow); err != nil {
		return src, refuse(fmt.Errorf("--workflow: %w", err))
	}
	branch := workspace.Branch(src.workflow)
	if err := r.checkNotKept(src.workflow); err != nil {
		return src, refuse(err)
	}

	if isURL(req.Repo) {
		if strings.HasPrefix(req.Repo, "-") || strings.ContainsAny(req.Repo, " \n\t") {
			return src, refuse(fmt.Errorf("--repo %q is not a repository URL", req.Repo))
		}
		if !req.Push {
			return src, refuse(fmt.Errorf("--repo %s is a URL: its result can only go back by git push; add --push (the branch is %s, never the default branch)", req.Repo, branch))
		}
		if req.IncludeDirty {
			return src, refuse(errors.New("--include-dirty is for a local checkout, not a URL"))
		}
		if _, served := proxy.GitPath(req.Repo); !served && (strings.HasPrefix(req.Repo, "https://") || strings.HasPrefix(req.Repo, "http://")) {
			return src, refuse(fmt.Errorf("--repo %s: git in the sandbox reaches an http(s) repository only through amelia's proxy, which takes its plain URL (https://HOST/PATH: no user name, query, fragment or percent-encoding); give that", req.Repo))
		}
		src.url = req.Repo
		return src, nil
	}
	if req.Push {
		return src, refuse(errors.New("--push is for a URL repository; for a local checkout the result comes back as a branch in it"))
	}
	repo, err := workspace.OpenHostRepo(ctx, req.Repo, r.host.Logger)
	if err != nil {
		return src, refuse(err)
	}
	src.local = repo
	// A repository without commits fails to name or resolve its branch;
	// only then is it asked whether that is why.
	empty := func() error {
		if has, err := repo.HasCommits(ctx); err != nil || has {
			return err
		}
		return refuse(fmt.Errorf("%s has no commits yet: the agent starts from a commit, so commit something first (git commit --allow-empty -m start)", repo.Dir))
	}
	if src.base == "" {
		if src.base, err = repo.DefaultBranch(ctx); err != nil {
			return src, cmp.Or(empty(), refuse(err))
		}
	}
	baseCommit, err := repo.ResolveBranch(ctx, src.base)
	if err != nil {
		if err := empty(); err != nil {
			return src, err
		}
	}
	switch {
	case err != nil && req.Base == "":
		return src, refuse(fmt.Errorf("the checked-out branch %s of %s has no commits yet: commit on it, or pass --base BRANCH", src.base, repo.Dir))
	case err != nil:
		return src, refuse(fmt.Errorf("--base: %w", err))
	}
	src.commit = baseCommit
	// The branch the result comes back as must be creatable now: it is
	// created only at the end, after the agent's tokens are spent.
	if err := repo.CheckNewBranch(ctx, branch, baseCommit); err != nil {
		if errors.Is(err, workspace.ErrBranchExists) {
			return src, refuse(fmt.Errorf("branch %s already exists in %s: pick another --workflow, or delete it (git branch -D %s)", branch, repo.Dir, branch))
		}
		return src, refuse(fmt.Errorf("%w: pick another --workflow, or rename the branch in the way", err))
	}
	if !req.IncludeDirty {
		dirty, err := repo.Dirty(ctx)
		if err != nil {
			return src, err
		}
		if len(dirty) > 0 {
			return src, refuse(fmt.Errorf("%s has uncommitted changes (%s): commit or stash them, or pass --include-dirty to carry them in as a commit", repo.Dir, listSome(dirty, 3)))
		}
	}
	return src, nil
}

// listSome is the first n items, and how many more there are.
func listSome(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

// checkPrompt refuses a prompt that could not travel: blank, not UTF-8
// (gRPC strings and JSON need it), or holding NUL (git refuses it in the
// commit message).
func checkPrompt(p string) error {
	switch {
	case strings.TrimSpace(p) == "":
		return errors.New("no task: the prompt is empty")
	case !utf8.ValidString(p):
		i := invalidUTF8At(p)
		return fmt.Errorf("the prompt is not UTF-8 (byte 0x%02x at offset %d): save it as UTF-8, e.g. iconv -f latin1 -t utf-8", p[i], i)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("the prompt holds a NUL byte at offset %d: remove it", strings.IndexByte(p, 0))
	}
	return nil
}

// invalidUTF8At is the offset of the first byte of s that is not UTF-8.
func invalidUTF8At(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return i
			}
		}
	}
	return len(s)
}

// checkNotKept refuses a workflow id that another run of this host is
// recorded with: in progress, or with its work or its worktree still in
// the profile's sandbox, where a new run could not add its own.
func (r *runner) checkNotKept(workflow string) error {
	if r.host.Runs == nil {
		return nil
	}
	rec, err := r.host.Runs.Get(r.req.Profile.Name, workflow)
	switch {
	case errors.Is(err, runstore.ErrNotFound):
		return nil
	case err != nil:
		return err
	case rec.State.Preparing():
		return fmt.Errorf("workflow %s is being prepared in sandbox %s by another run, or was when its host last saw it (%s): pick another --workflow, or remove what it left with %s --discard",
			workflow, rec.SandboxName(), rec.State, RecoverCommand(rec))
	case rec.State.AgentMayRun() || rec.State == runstore.Ended:
		return fmt.Errorf("workflow %s is running in sandbox %s, or was when its host last saw it: follow it with amelia attach --profile %s %s, or pick another --workflow",
			workflow, rec.SandboxName(), rec.Profile, workflow)
	case rec.State.HoldsWork():
		reason := rec.Reason
		if reason == "" {
			reason = string(rec.State)
		}
		return fmt.Errorf("workflow %s has work in sandbox %s from a run that did not finish (%s): bring it back with %s, or pick another --workflow",
			workflow, rec.SandboxName(), reason, RecoverCommand(rec))
	case rec.State == runstore.Exported:
		return fmt.Errorf("workflow %s has work that amelia gc exported to %s: bring it back with %s, or pick another --workflow",
			workflow, rec.Export, RecoverCommand(rec))
	case rec.State == runstore.Discarded:
		return fmt.Errorf("workflow %s still has its worktree in sandbox %s, from a run that left no work: remove it with %s --discard, or pick another --workflow",
			workflow, rec.SandboxName(), RecoverCommand(rec))
	}
	return fmt.Errorf("workflow %s still has its worktree in sandbox %s (--keep-worktree): remove it with %s --discard, or pick another --workflow",
		workflow, rec.SandboxName(), RecoverCommand(rec))
}
