// Package image is the Docker provider's sandbox image: its Dockerfile
// (image/Dockerfile at the top of the repository is a link to it), embedded so
// that amelia builds it wherever it runs, and the facts about the image that
// the Docker provider and its tests rely on.
package image

import (
	_ "embed"
	"slices"
	"strings"
)

// Dockerfile builds the sandbox image FROM the build argument BASE_IMAGE,
// from a context holding it and the static worker as WorkerFile.
//
//go:embed Dockerfile
var Dockerfile []byte

// Bootstrap is bootstrap-base.sh: it makes TestBase from Debian's packages
// with mmdebstrap, for engines that cannot pull (`amelia init
// --bootstrap`, `make base-image`).
//
//go:embed bootstrap-base.sh
var Bootstrap []byte

// Toolchain is what the sandbox image holds by default beyond Amelia's
// own needs, so that an agent can build and test common projects: Debian's
// compilers and make (build-essential), pkg-config, Python 3 with venv and
// pip, curl, unzip, xz, jq, less, an ssh client, and ripgrep and fzf, with
// which CLI coding agents (opencode) search. A profile changes it
// with docker.packages; a project's own environment (docker.dockerfile, a
// devcontainer, docker.image) does not get it unless it asks.
// The Dockerfile's PACKAGES default and bootstrap-base.sh hold the same
// list (a test keeps them so).
var Toolchain = []string{
	"build-essential", "pkg-config",
	"python3", "python3-venv", "python3-pip",
	"curl", "unzip", "xz-utils", "jq", "less", "openssh-client",
	"ripgrep", "fzf",
}

// BaseCore is what Amelia's image needs of its base: bootstrap-base.sh
// makes TestBase from it and Toolchain.
var BaseCore = []string{"git", "ca-certificates", "bash", "coreutils", "findutils", "grep", "procps", "tini", "passwd"}

// BasePackages is the BasePackagesLabel of a current TestBase.
func BasePackages() string {
	return strings.Join(append(slices.Clone(BaseCore), Toolchain...), ",")
}

const (
	// WorkerFile is the worker's name in the build context.
	WorkerFile = "amelia-worker"
	// WorkerPath is where the image holds the worker.
	WorkerPath = "/opt/amelia/bin/amelia-worker"
	// User is the unprivileged user commands run as.
	User = "amelia"
	// Workdir is the working directory, owned by User.
	Workdir = "/workspace"
	// BaseArg is the build argument naming the base image.
	BaseArg = "BASE_IMAGE"
	// PackagesArg is the build argument listing, space-separated, the
	// Debian packages the image holds beyond Amelia's own needs
	// (docker.packages); the Dockerfile installs those the base lacks.
	PackagesArg = "PACKAGES"
	// BasePackagesLabel is on the image bootstrap-base.sh makes: the
	// packages it was made from, comma-separated, so that the script
	// makes it again when its list has changed.
	BasePackagesLabel = "amelia.base-packages"
	// DefaultBase is the base when a profile names none.
	DefaultBase = "debian:bookworm-slim"
	// TestBase is the base that image/bootstrap-base.sh makes from Debian's
	// packages, for machines without a registry.
	TestBase = "amelia-base:bookworm"
)
