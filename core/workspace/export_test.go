package workspace

import (
	"errors"
	"path/filepath"
	"testing"
)

// A bundle kept on the host (amelia gc's export) comes in as a branch
// with the checks a bundle from a sandbox gets; its header is checked
// when it is made.
func TestStoreBundle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	host, dir := newHostRepo(t)
	base := gitT(t, dir, "rev-parse", "main")
	agent := filepath.Join(t.TempDir(), "agent")
	gitT(t, dir, "clone", "-q", dir, agent)
	gitT(t, agent, "checkout", "-q", "-B", "amelia/wf", base)
	writeFile(t, filepath.Join(agent, "kept.txt"), "kept\n")
	gitT(t, agent, "add", "-A")
	gitT(t, agent, "commit", "-qm", "kept work")
	gitT(t, agent, "checkout", "-q", "-B", "amelia/other", base)
	writeFile(t, filepath.Join(agent, "other.txt"), "other\n")
	gitT(t, agent, "add", "-A")
	gitT(t, agent, "commit", "-qm", "other work")
	good := bundleOf(t, agent, "refs/heads/amelia/wf", "^"+base)
	other := bundleOf(t, agent, "refs/heads/amelia/other", "^"+base)

	for _, c := range []struct {
		name string
		data []byte
		id   string
		ok   bool
	}{
		{name: "the workflow's branch", data: good, id: "wf", ok: true},
		{name: "another branch", data: other, id: "wf"},
		{name: "not a bundle", data: []byte("hello\n"), id: "wf"},
	} {
		err := CheckBundleHeader(c.data, c.id)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrRefused) {
			t.Errorf("%s: CheckBundleHeader: %v, want ok %v", c.name, err, c.ok)
		}
	}

	if _, err := host.StoreBundle(ctx, other, "wf", Base{Branch: "main", Commit: base}, ResultOptions{}); !errors.Is(err, ErrRefused) {
		t.Errorf("StoreBundle of another branch's bundle: %v, want a refusal", err)
	}
	res, err := host.StoreBundle(ctx, good, "wf", Base{Branch: "main", Commit: base}, ResultOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Branch != "amelia/wf" || res.Commits != 1 {
		t.Errorf("result %+v", res)
	}
	if got := gitT(t, dir, "show", "amelia/wf:kept.txt"); got != "kept" {
		t.Errorf("kept.txt on the branch: %q", got)
	}
	if _, err := host.StoreBundle(ctx, good, "wf", Base{Branch: "main", Commit: base}, ResultOptions{}); !errors.Is(err, ErrBranchExists) {
		t.Errorf("StoreBundle again: %v, want ErrBranchExists", err)
	}
}
