package sandboxfs

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"

	"github.com/amelia-sandbox/amelia/core/stack"
	"github.com/amelia-sandbox/amelia/core/workspace"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// ForStack is the files of st's sandbox: under its workdir, as the
// sandbox's user, or, with workflow, under that workflow's checkout, as
// its uid where the provider separates runs. st is Up and has its worker
// (InstallWorker); for a workflow, also its workspace (OpenWorkspace),
// and the stack becomes the workflow's (Stack.As).
func ForStack(ctx context.Context, st *stack.Stack, workflow string) (*FS, error) {
	if st.Running == nil || st.Worker == "" {
		return nil, errors.New("files of a sandbox: no worker in it yet (Up and InstallWorker first)")
	}
	var archive sdk.Archiver
	if sb := st.Sandbox(); sb.Info.Capabilities.Archive {
		archive, _ = sb.Provider.(sdk.Archiver)
	}
	if workflow == "" {
		f := New(st, st.Worker, st.Running.Workdir)
		if archive != nil {
			// The worker, as the sandbox's user, makes it when it is
			// not there.
			f.Archive, f.Stage = archive, path.Join(st.Running.Workdir, ".amelia", "stage")
		}
		return f, nil
	}
	if err := workspace.ValidateWorkflowID(workflow); err != nil {
		return nil, err
	}
	if st.Workspace == nil {
		return nil, errors.New("files of a workflow: no workspace yet (OpenWorkspace first)")
	}
	ids, err := workspace.Workflows(ctx, st)
	if err != nil {
		return nil, fmt.Errorf("list the sandbox's workflows: %w", err)
	}
	if !slices.Contains(ids, workflow) {
		return nil, fmt.Errorf("workflow %s has no checkout in the sandbox; amelia sandbox ls lists those it has", workflow)
	}
	if err := st.As(ctx, workflow, nil); err != nil {
		return nil, err
	}
	f := New(workspace.RunAs(st, st.UID), st.Worker, st.Workspace.WorktreeDir(workflow))
	if archive != nil && st.UID != "" {
		// The workflow's uid cannot make it: the sandbox's user does.
		// Failing that, files stream over the worker.
		if stage, err := st.Workspace.StageDir(ctx); err == nil {
			f.Archive, f.Stage = archive, stage
		}
	} else if archive != nil {
		f.Archive, f.Stage = archive, path.Join(st.Running.Workdir, ".amelia", "stage")
	}
	return f, nil
}
