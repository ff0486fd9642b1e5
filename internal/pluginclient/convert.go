package pluginclient

import (
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/amelia-sandbox/amelia/internal/providerwire/providerv1"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Conversions between the SDK's types and the wire messages, on the
// host's side: requests out, answers in. (package sdk has the other
// direction.)

func refToPB(r sdk.SandboxRef) *pb.SandboxRef {
	return &pb.SandboxRef{Name: r.Name, Id: r.ID, Config: r.Config}
}

func refFromPB(r *pb.SandboxRef) sdk.SandboxRef {
	if r == nil {
		return sdk.SandboxRef{}
	}
	return sdk.SandboxRef{Name: r.GetName(), ID: r.GetId(), Config: r.GetConfig()}
}

func infoFromPB(in *pb.InfoResponse) sdk.Info {
	c := in.GetCapabilities()
	out := sdk.Info{
		Name:        in.GetName(),
		Version:     in.GetVersion(),
		Description: in.GetDescription(),
		Capabilities: sdk.Capabilities{
			Isolated:       c.GetIsolated(),
			ExecAsRoot:     c.GetExecAsRoot(),
			ResourceLimits: c.GetResourceLimits(),
			TTY:            c.GetTty(),
			RunUsers:       c.GetRunUsers(),
			Archive:        c.GetArchive(),
		},
	}
	for _, v := range in.GetApiVersions() {
		out.APIVersions = append(out.APIVersions, int(v))
	}
	for _, m := range c.GetEgressModes() {
		out.EgressModes = append(out.EgressModes, sdk.NetworkMode(m))
	}
	return out
}

func specToPB(s sdk.Spec) *pb.EnsureRunningRequest {
	return &pb.EnsureRunningRequest{
		Ref:     refToPB(s.SandboxRef),
		Network: networkToPB(s.Network),
		Labels:  s.Labels,
		Setup:   setupToPB(s.Setup),

		IdleTimeoutMs: s.Lifetime.IdleTimeout.Milliseconds(),
		MaxLifetimeMs: s.Lifetime.MaxLifetime.Milliseconds(),
	}
}

func setupToPB(cs []sdk.SetupCommand) []*pb.SetupCommand {
	if len(cs) == 0 {
		return nil
	}
	out := make([]*pb.SetupCommand, len(cs))
	for i, c := range cs {
		out[i] = &pb.SetupCommand{Name: c.Name, Argv: c.Argv}
	}
	return out
}

func networkToPB(n sdk.NetworkPolicy) *pb.NetworkPolicy {
	return &pb.NetworkPolicy{Mode: string(n.Mode), AllowedHosts: n.AllowedHosts}
}

func problemsFromPB(ps []*pb.SettingsProblem) []sdk.Problem {
	out := make([]sdk.Problem, len(ps))
	for i, p := range ps {
		out[i] = sdk.Problem{Key: p.GetKey(), Message: p.GetMessage()}
	}
	return out
}

func sandboxFromPB(r *pb.EnsureRunningResponse) sdk.Sandbox {
	return sdk.Sandbox{
		Ref: refFromPB(r.GetRef()), Created: r.GetCreated(), Workdir: r.GetWorkdir(), Details: r.GetDetails(),
		Worker: sdk.WorkerPlace{Dir: r.GetWorkerDir(), Preinstalled: r.GetWorkerPreinstalled()},
	}
}

func listedFromPB(l *pb.ListedSandbox) sdk.Listed {
	out := sdk.Listed{Ref: refFromPB(l.GetRef()), Labels: l.GetLabels(), State: sdk.HealthState(l.GetState())}
	if l.GetCreated() != nil {
		out.Created = l.GetCreated().AsTime()
	}
	return out
}

func execStartToPB(r sdk.ExecRequest, stdin bool) *pb.ExecStart {
	s := &pb.ExecStart{
		Sandbox:  refToPB(r.Sandbox),
		Argv:     r.Argv,
		Env:      r.Env,
		Dir:      r.Dir,
		User:     r.User,
		Stdin:    stdin,
		Tty:      r.TTY,
		TermSize: &pb.TermSize{Rows: r.Size.Rows, Cols: r.Size.Cols},
		Traffic:  pb.Traffic(r.Traffic),
	}
	if r.CancelGrace > 0 {
		s.CancelGrace = durationpb.New(r.CancelGrace)
	}
	if r.Timeout > 0 {
		s.Timeout = durationpb.New(r.Timeout)
	}
	return s
}

func exitFromPB(e *pb.ExitStatus) sdk.ExitStatus {
	return sdk.ExitStatus{Code: int(e.GetCode()), Signal: e.GetSignal(), Canceled: e.GetCanceled(), TimedOut: e.GetTimedOut()}
}
