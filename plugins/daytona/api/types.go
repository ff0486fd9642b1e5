// Package api is a small client for the parts of Daytona's REST API that
// the Daytona provider uses: sandboxes (list by label, create, get, start,
// stop, delete), SSH access tokens for the SSH gateway, and the toolbox's
// process/execute. Types and field names follow Daytona's published
// OpenAPI files (api-client-go/openapi.yaml and
// toolbox-api-client-go/openapi.yaml, copied into
// plugins/daytona/daytonatest/testdata); the fake in daytonatest is checked
// against the same files.
package api

import "time"

// State is a sandbox's state (SandboxState).
type State string

// The sandbox states the provider acts on; the API has more (archived,
// resizing, ...), which it reports as they are.
const (
	StateCreating         State = "creating"
	StateRestoring        State = "restoring"
	StateDestroyed        State = "destroyed"
	StateDestroying       State = "destroying"
	StateStarted          State = "started"
	StateStopped          State = "stopped"
	StateStarting         State = "starting"
	StateStopping         State = "stopping"
	StateError            State = "error"
	StateBuildFailed      State = "build_failed"
	StatePendingBuild     State = "pending_build"
	StateBuildingSnapshot State = "building_snapshot"
	StateUnknown          State = "unknown"
	StatePullingSnapshot  State = "pulling_snapshot"
	StateArchived         State = "archived"
	StateArchiving        State = "archiving"
	StatePaused           State = "paused"
	StatePausing          State = "pausing"
	StateResuming         State = "resuming"
)

// Failed reports whether the sandbox cannot start without help.
func (s State) Failed() bool { return s == StateError || s == StateBuildFailed }

// Stopped reports whether the sandbox is at rest, not running: stopped,
// archived or paused. POST /sandbox/{id}/start starts the first two; a
// paused one it resumes only when it is a VM (Sandbox.Resumable).
func (s State) Stopped() bool { return s == StateStopped || s == StateArchived || s == StatePaused }

// Gone reports whether the state is deleted or being deleted; see
// Sandbox.Gone, which also reads desiredState.
func (s State) Gone() bool { return s == StateDestroyed || s == StateDestroying }

// DesiredState is the state a sandbox is on its way to
// (SandboxDesiredState).
type DesiredState string

// The desired states.
const (
	DesiredStarted   DesiredState = "started"
	DesiredStopped   DesiredState = "stopped"
	DesiredDestroyed DesiredState = "destroyed"
	DesiredArchived  DesiredState = "archived"
	DesiredPaused    DesiredState = "paused"
	DesiredResized   DesiredState = "resized"
)

// The sandbox classes (SandboxClass); the class comes from the snapshot.
const (
	ClassContainer = "container"
	ClassLinuxVM   = "linux-vm"
	ClassWindows   = "windows"
	ClassAndroid   = "android"
)

// Gone reports whether the sandbox is deleted or on its way there. Daytona
// deletes softly: DELETE leaves the sandbox in its state with
// desiredState destroyed and a new name (sandbox.service.ts destroy,
// sandbox.entity.ts getSoftDeleteUpdate), and destroys it later; the
// list shows such a sandbox in its old state.
func (sb Sandbox) Gone() bool { return sb.State.Gone() || sb.DesiredState == DesiredDestroyed }

// Settled reports whether no state change is pending: the state is the
// desired one. error and build_failed are settled whatever was desired
// (Daytona clears its pending flag there: sandbox.entity.ts
// getInvariantChanges). An answer without desiredState is taken as
// settled.
func (sb Sandbox) Settled() bool {
	return sb.State.Failed() || sb.DesiredState == "" || string(sb.State) == string(sb.DesiredState)
}

// Resumable reports whether POST /sandbox/{id}/start resumes the sandbox
// when it is paused: only VM classes can be (sandbox.service.ts start
// answers 422 "Resuming is not supported for this sandbox" for others).
func (sb Sandbox) Resumable() bool {
	return sb.SandboxClass == ClassLinuxVM || sb.SandboxClass == ClassWindows
}

// Sandbox is the API's Sandbox (and, with fewer fields filled,
// SandboxListItem).
type Sandbox struct {
	ID                  string            `json:"id"`
	OrganizationID      string            `json:"organizationId"`
	Name                string            `json:"name"`
	Snapshot            string            `json:"snapshot,omitempty"`
	User                string            `json:"user"`
	Env                 map[string]string `json:"env"`
	Labels              map[string]string `json:"labels"`
	Public              bool              `json:"public"`
	NetworkBlockAll     bool              `json:"networkBlockAll"`
	NetworkAllowList    string            `json:"networkAllowList,omitempty"`
	Target              string            `json:"target"`
	CPU                 float64           `json:"cpu"`
	GPU                 float64           `json:"gpu"`
	Memory              float64           `json:"memory"`
	Disk                float64           `json:"disk"`
	State               State             `json:"state,omitempty"`
	DesiredState        DesiredState      `json:"desiredState,omitempty"`
	ErrorReason         string            `json:"errorReason,omitempty"`
	Recoverable         bool              `json:"recoverable,omitempty"`
	AutoStopInterval    *float64          `json:"autoStopInterval,omitempty"`
	AutoArchiveInterval *float64          `json:"autoArchiveInterval,omitempty"`
	AutoDeleteInterval  *float64          `json:"autoDeleteInterval,omitempty"`
	BuildInfo           *BuildInfo        `json:"buildInfo,omitempty"`
	SandboxClass        string            `json:"sandboxClass,omitempty"`
	CreatedAt           string            `json:"createdAt,omitempty"`
	UpdatedAt           string            `json:"updatedAt,omitempty"`
	LastActivityAt      string            `json:"lastActivityAt,omitempty"`
	ToolboxProxyURL     string            `json:"toolboxProxyUrl"`
}

// BuildInfo is how a sandbox's image was built.
type BuildInfo struct {
	DockerfileContent string    `json:"dockerfileContent,omitempty"`
	ContextHashes     []string  `json:"contextHashes,omitempty"`
	CreatedAt         time.Time `json:"createdAt"`
	UpdatedAt         time.Time `json:"updatedAt"`
	SnapshotRef       string    `json:"snapshotRef"`
}

// ListSandboxesResponse is a page of GET /sandbox.
type ListSandboxesResponse struct {
	Items      []Sandbox `json:"items"`
	NextCursor *string   `json:"nextCursor"`
}

// CreateSandbox is the body of POST /sandbox. Resources (CPU, Memory,
// Disk) may not be given with a Snapshot: the API rejects that.
type CreateSandbox struct {
	Name             string            `json:"name,omitempty"`
	Snapshot         string            `json:"snapshot,omitempty"`
	User             string            `json:"user,omitempty"`
	Env              map[string]string `json:"env,omitempty"`
	Labels           map[string]string `json:"labels,omitempty"`
	Public           *bool             `json:"public,omitempty"`
	NetworkBlockAll  bool              `json:"networkBlockAll,omitempty"`
	Target           string            `json:"target,omitempty"`
	CPU              int               `json:"cpu,omitempty"`
	Memory           int               `json:"memory,omitempty"`
	Disk             int               `json:"disk,omitempty"`
	AutoStopInterval *int              `json:"autoStopInterval,omitempty"`
	BuildInfo        *CreateBuildInfo  `json:"buildInfo,omitempty"`
}

// CreateBuildInfo builds a sandbox's image from a Dockerfile.
type CreateBuildInfo struct {
	DockerfileContent string   `json:"dockerfileContent"`
	ContextHashes     []string `json:"contextHashes,omitempty"`
}

// SSHAccess is an SSH access token (SshAccessDto): Token is the user
// name to log in to the SSH gateway with, until ExpiresAt.
type SSHAccess struct {
	ID         string    `json:"id"`
	SandboxID  string    `json:"sandboxId"`
	Token      string    `json:"token"`
	ExpiresAt  time.Time `json:"expiresAt"`
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
	SSHCommand string    `json:"sshCommand"`
}

// SSHAccessValidation is GET /sandbox/ssh-access/validate's answer
// (SshAccessValidationDto).
type SSHAccessValidation struct {
	Valid     bool   `json:"valid"`
	SandboxID string `json:"sandboxId"`
}

// ErrorBody is the body of the API's error responses.
type ErrorBody struct {
	StatusCode int `json:"statusCode"`
	// Message is a string, or a list of them for validation errors.
	Message any    `json:"message"`
	Error   string `json:"error,omitempty"`
}

// ExecuteRequest is the toolbox's POST /process/execute body.
type ExecuteRequest struct {
	Command string            `json:"command"`
	Cwd     string            `json:"cwd,omitempty"`
	Envs    map[string]string `json:"envs,omitempty"`
	// Timeout is in seconds; the toolbox's default is 10.
	Timeout int `json:"timeout,omitempty"`
}

// ExecuteResponse is the toolbox's answer: the command's combined output
// and its exit code.
type ExecuteResponse struct {
	ExitCode int    `json:"exitCode"`
	Result   string `json:"result"`
}

// ToolboxError is the toolbox's ErrorResponse.
type ToolboxError struct {
	Code       string `json:"code,omitempty"`
	Message    string `json:"message"`
	Method     string `json:"method,omitempty"`
	Path       string `json:"path,omitempty"`
	Source     string `json:"source,omitempty"`
	StatusCode int    `json:"statusCode"`
	Timestamp  string `json:"timestamp,omitempty"`
}

// SnapshotState is a snapshot's state (SnapshotState).
type SnapshotState string

// The snapshot states (snapshot-state.enum.ts): a snapshot made from
// build info goes pending, building, then active, or build_failed.
const (
	SnapshotPending     SnapshotState = "pending"
	SnapshotBuilding    SnapshotState = "building"
	SnapshotPulling     SnapshotState = "pulling"
	SnapshotActive      SnapshotState = "active"
	SnapshotInactive    SnapshotState = "inactive"
	SnapshotError       SnapshotState = "error"
	SnapshotBuildFailed SnapshotState = "build_failed"
	SnapshotRemoving    SnapshotState = "removing"
)

// Failed reports whether a snapshot ended without being usable.
func (s SnapshotState) Failed() bool { return s == SnapshotError || s == SnapshotBuildFailed }

// CreateSnapshot is the body of POST /snapshots (CreateSnapshot): an
// image to pull (ImageName), or a Dockerfile to build (BuildInfo).
type CreateSnapshot struct {
	Name      string           `json:"name"`
	ImageName string           `json:"imageName,omitempty"`
	BuildInfo *CreateBuildInfo `json:"buildInfo,omitempty"`
	CPU       int              `json:"cpu,omitempty"`
	Memory    int              `json:"memory,omitempty"`
	Disk      int              `json:"disk,omitempty"`
}

// PaginatedSnapshots is a page of GET /snapshots.
type PaginatedSnapshots struct {
	Items      []Snapshot `json:"items"`
	Total      int        `json:"total"`
	Page       int        `json:"page"`
	TotalPages int        `json:"totalPages"`
}

// Snapshot is a snapshot (SnapshotDto), as far as Amelia reads it.
type Snapshot struct {
	ID          string        `json:"id"`
	Name        string        `json:"name"`
	State       SnapshotState `json:"state"`
	ErrorReason string        `json:"errorReason,omitempty"`
	ImageName   string        `json:"imageName,omitempty"`
	Ref         string        `json:"ref,omitempty"`
	General     bool          `json:"general"`
	BuildInfo   *BuildInfo    `json:"buildInfo,omitempty"`
	CreatedAt   time.Time     `json:"createdAt"`
}
