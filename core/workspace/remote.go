package workspace

import (
	"bufio"
	"context"
	"fmt"
	"strings"
)

// credentialArgs are the `git -c` options that make the worker git's only
// credential helper (none without a worker): the empty value first clears
// any helper configured in the sandbox. git runs a helper value through the
// shell, and a value not starting with "!" or "/" would be taken as
// "git credential-<value>", so the path goes single-quoted after a "!" (New
// refused a path that could break out of the quotes).
func (w *Workspace) credentialArgs() []string {
	if w.worker == "" {
		return nil
	}
	return []string{"-c", "credential.helper=", "-c", "credential.helper=!'" + w.worker + "' git-credential"}
}

// remote is the URL git in the sandbox uses for url (Options.GitURL),
// checked to be one it cannot take for an option or another line.
func (w *Workspace) remote(url string) (string, error) {
	remote := url
	if w.gitURL != nil {
		remote = w.gitURL(url)
	}
	for _, u := range []string{url, remote} {
		if u == "" || strings.HasPrefix(u, "-") || strings.ContainsAny(u, "\n\x00") {
			return "", fmt.Errorf("invalid repository URL %q", u)
		}
	}
	return remote, nil
}

// SyncURL brings branch (empty: the remote's default branch) of the
// repository at url into the sandbox's bare repo: `git clone --bare` the
// first time, then `git fetch` of that branch into refs/heads/<branch>,
// under the lock. git runs inside the sandbox with the worker as its
// credential helper, at the URL Options.GitURL gives.
func (w *Workspace) SyncURL(ctx context.Context, url, branch string) (Base, error) {
	remote, err := w.remote(url)
	if err != nil {
		return Base{}, fmt.Errorf("sync %s into sandbox: %w", url, err)
	}
	cred := w.credentialArgs()
	if branch == "" {
		var err error
		if branch, err = w.remoteDefault(ctx, remote, cred); err != nil {
			return Base{}, fmt.Errorf("sync %s into sandbox: %w", url, err)
		}
	}
	if err := checkBranchName(branch); err != nil {
		return Base{}, fmt.Errorf("sync %s into sandbox: %w", url, err)
	}
	// Positional parameters: repo url branch, then the credential -c pairs.
	const body = `repo=$1 url=$2 br=$3
shift 3
lock
if [ ! -d "$repo" ]; then
	g "$@" clone --quiet --bare -- "$url" "$repo"
else
	g -C "$repo" "$@" fetch --quiet --no-tags -- "$url" "+refs/heads/$br:refs/heads/$br"
fi
g -C "$repo" rev-parse --verify --quiet "refs/heads/$br^{commit}" || { echo "branch $br not found in $url" >&2; exit 3; }
`
	var out strings.Builder
	err = w.script(ctx, "git clone/fetch", w.gitEnv, nil, &out, body, append([]string{w.RepoDir(), remote, branch}, cred...)...)
	if err != nil {
		return Base{}, fmt.Errorf("sync %s into sandbox: %w", url, err)
	}
	c := strings.TrimSpace(out.String())
	w.log.Info("synced remote repo", "url", url, "branch", branch, "commit", c)
	return Base{Branch: branch, Commit: c, Start: c}, nil
}

// remoteDefault asks the remote which branch its HEAD names.
func (w *Workspace) remoteDefault(ctx context.Context, url string, cred []string) (string, error) {
	var out strings.Builder
	argv := append(append([]string{"git"}, cred...), "ls-remote", "--symref", "--", url, "HEAD")
	if err := w.exec(ctx, "git ls-remote", argv, w.gitEnv, nil, &out); err != nil {
		return "", fmt.Errorf("find the default branch: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		if ref, ok := strings.CutPrefix(sc.Text(), "ref: refs/heads/"); ok {
			if b, _, ok := strings.Cut(ref, "\tHEAD"); ok {
				return b, nil
			}
		}
	}
	return "", fmt.Errorf("find the default branch: the remote names none, pass --base BRANCH")
}

// Push pushes amelia/<id> from the workflow's checkout in the sandbox, as
// its uid, to url's refs/heads/amelia/<id>. The refspec is built here,
// never forced (no "+", no --force), and it is refused when the branch is
// base's branch (the default branch), so a push can only create or
// fast-forward the workflow's own branch.
func (w *Workspace) Push(ctx context.Context, id, url string, base Base) error {
	if err := ValidateWorkflowID(id); err != nil {
		return err
	}
	br := Branch(id)
	if br == base.Branch {
		return fmt.Errorf("push %s: %w: it is the base branch", br, ErrRefused)
	}
	remote, err := w.remote(url)
	if err != nil {
		return fmt.Errorf("push %s: %w", br, err)
	}
	ref := "refs/heads/" + br
	// Positional parameters: the checkout, the remote and the ref, then
	// the credential -c pairs. Only a checkout of the uid's own is pushed
	// from (see mine).
	const body = `wt=$1 url=$2 ref=$3
shift 3
mine "$wt" || { echo "$wt is not the workflow's checkout" >&2; exit 1; }
g -C "$wt" "$@" push --quiet --no-verify -- "$url" "$ref:$ref"
`
	if err := w.scriptFor(ctx, id, "git push", w.gitEnv, nil, nil, body, append([]string{w.WorktreeDir(id), remote, ref}, w.credentialArgs()...)...); err != nil {
		return fmt.Errorf("push %s to %s: %w", br, url, err)
	}
	w.log.Info("pushed", "branch", br, "url", url)
	return nil
}

// DiffStat is `git diff --stat` of the workflow's branch against base, in
// its checkout in the sandbox, as its uid: what a run that pushed its
// branch (and so fetched nothing to the host) changed.
func (w *Workspace) DiffStat(ctx context.Context, id, base string) (string, error) {
	if err := ValidateWorkflowID(id); err != nil {
		return "", err
	}
	const body = `wt=$1 base=$2 br=$3
mine "$wt" || { echo "$wt is not the workflow's checkout" >&2; exit 1; }
g -C "$wt" diff --stat --no-ext-diff --no-textconv --end-of-options "$base" "refs/heads/$br" --
`
	var out strings.Builder
	if err := w.scriptFor(ctx, id, "git diff --stat", nil, nil, &out, body, w.WorktreeDir(id), base, Branch(id)); err != nil {
		return "", fmt.Errorf("diff --stat of %s: %w", Branch(id), err)
	}
	return strings.TrimSpace(out.String()), nil
}
