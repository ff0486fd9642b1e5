package docker_test

import (
	"context"
	"path"
	"runtime"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/workerbin"
)

// TestWorkerStamp: the image holds the worker's stamp beside it, and the
// host takes a preinstalled worker's stamp for its hash only where root
// alone could have written both. A counterfeit worker (one byte changed,
// the real stamp beside it) shows which: trusted, it is used as it is;
// untrusted, the host hashes it, finds it is not its worker and installs
// its own.
func TestWorkerStamp(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	p := newProvider(t)
	sb := up(t, p, spec(t, dockertest.Settings(nil), sdk.NetworkOpen))
	ex := sandboxexec.Bind(p, sb.Ref)
	in := &driver.Installer{Dirs: []string{workerDir}, Provider: "docker"}

	host, err := workerbin.Find([]string{workerDir}, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	var sums workerbin.Sums
	sum, size, err := sums.Sum(host)
	if err != nil {
		t.Fatal(err)
	}
	stamp := run(t, p, sb.Ref, "", "cat", image.WorkerPath+workerbin.StampSuffix)
	if stamp != string(workerbin.Stamp(sum, size)) {
		t.Errorf("the image's stamp is %q, want %q", stamp, workerbin.Stamp(sum, size))
	}
	if got, err := in.EnsureWorker(t.Context(), ex, sb.Worker); err != nil || got != image.WorkerPath {
		t.Fatalf("EnsureWorker = %q, %v; want the image's %s", got, err, image.WorkerPath)
	}

	const dir = "/opt/fake"
	fake := path.Join(dir, "amelia-worker")
	counterfeit := `set -e
rm -rf ` + dir + `; mkdir -m 755 ` + dir + `
cp ` + image.WorkerPath + ` ` + image.WorkerPath + workerbin.StampSuffix + ` ` + dir + `/
printf X | dd of=` + fake + ` bs=1 seek=4096 conv=notrunc 2>/dev/null`
	// step is a script run after the counterfeit is made, as user ("" is
	// the sandbox's).
	type step struct{ user, script string }
	for _, tc := range []struct {
		name    string
		steps   []step
		asRoot  bool // the probe runs as root, as an agent might
		trusted bool
	}{
		{name: "root's, in root's directories", trusted: true},
		{name: "a directory others may write", steps: []step{{"root", "chmod 777 " + dir}}},
		{name: "a stamp of the sandbox's user", steps: []step{
			{"root", "rm " + fake + ".sha256; chmod 777 " + dir},
			{"", "cp " + image.WorkerPath + ".sha256 " + dir + "/"},
			{"root", "chmod 755 " + dir},
		}},
		{name: "a stamp whose size is not the file's", steps: []step{{"root", "truncate -s -1 " + fake}}},
		{name: "probed as root", asRoot: true},
		{name: "a stamp that is a link", steps: []step{{"root", "mv " + fake + ".sha256 " + dir + "/stamp; ln -s stamp " + fake + ".sha256"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run(t, p, sb.Ref, "root", "sh", "-c", counterfeit)
			for _, s := range tc.steps {
				run(t, p, sb.Ref, s.user, "sh", "-c", s.script)
			}
			ex := ex
			if tc.asRoot {
				ex = rootExecer{ex}
			}
			got, err := in.EnsureWorker(t.Context(), ex, sdk.WorkerPlace{Preinstalled: []string{fake}})
			if err != nil {
				t.Fatal(err)
			}
			if trusted := got == fake; trusted != tc.trusted {
				t.Errorf("EnsureWorker = %q: the stamp trusted = %v, want %v (%s)", got, trusted, tc.trusted,
					strings.TrimSpace(run(t, p, sb.Ref, "", "ls", "-la", dir)))
			}
		})
	}
}

// rootExecer runs every request as root.
type rootExecer struct{ sandboxexec.Execer }

func (r rootExecer) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	req.User = "root"
	return r.Execer.Exec(ctx, req, eio)
}
