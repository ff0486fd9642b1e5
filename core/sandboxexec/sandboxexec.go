// Package sandboxexec is how core runs processes in one sandbox, chosen
// before: Execer is what code that works inside a sandbox takes (the
// workspace, the worker driver, the tunnel, a run's steps), and Bind makes
// one of a provider and a sandbox. core/sandbox's Sandbox is one too.
package sandboxexec

import (
	"context"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Execer runs processes in one sandbox, chosen before. Its Exec fills in
// ExecRequest.Sandbox itself, so an sdk.Provider, whose Exec needs it
// filled in, is not an Execer; Bind makes one.
type Execer interface {
	Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error)
	// SandboxRef is the sandbox every request goes to.
	SandboxRef() sdk.SandboxRef
}

// Bind is the Execer that runs processes in the sandbox ref names, through
// p.
func Bind(p sdk.Provider, ref sdk.SandboxRef) Execer { return bound{p: p, ref: ref} }

type bound struct {
	p   sdk.Provider
	ref sdk.SandboxRef
}

func (b bound) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	req.Sandbox = b.ref
	return b.p.Exec(ctx, req, eio)
}

func (b bound) SandboxRef() sdk.SandboxRef { return b.ref }
