package sdk

import "context"

// Execer runs processes in one sandbox, chosen before: what code that works
// inside a sandbox takes (Amelia's workspace, worker driver and tunnel, a
// provider's tests). Its Exec fills in ExecRequest.Sandbox itself, so a
// Provider, whose Exec needs it filled in, is not an Execer; Bind makes
// one.
type Execer interface {
	Exec(ctx context.Context, req ExecRequest, eio ExecIO) (ExitStatus, error)
	// SandboxRef is the sandbox every request goes to.
	SandboxRef() SandboxRef
}

// Bind is the Execer that runs processes in the sandbox ref names, through
// p.
func Bind(p Provider, ref SandboxRef) Execer { return bound{p: p, ref: ref} }

type bound struct {
	p   Provider
	ref SandboxRef
}

func (b bound) Exec(ctx context.Context, req ExecRequest, eio ExecIO) (ExitStatus, error) {
	req.Sandbox = b.ref
	return b.p.Exec(ctx, req, eio)
}

func (b bound) SandboxRef() SandboxRef { return b.ref }
