// Package image is the Docker provider's sandbox image: its Dockerfile
// (image/Dockerfile at the top of the repository is a link to it), embedded so
// that amelia builds it wherever it runs, and the facts about the image that
// the Docker provider and its tests rely on.
package image

import _ "embed"

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
	// DefaultBase is the base when a profile names none.
	DefaultBase = "debian:bookworm-slim"
	// TestBase is the base that image/bootstrap-base.sh makes from Debian's
	// packages, for machines without a registry.
	TestBase = "amelia-base:bookworm"
)
