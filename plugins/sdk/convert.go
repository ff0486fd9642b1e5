package sdk

import (
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/amelia-sandbox/amelia/internal/providerwire/providerv1"
)

// Conversions between the SDK's types and the wire messages.

func refToPB(r SandboxRef) *pb.SandboxRef {
	return &pb.SandboxRef{Name: r.Name, Id: r.ID, Config: r.Config}
}

func refFromPB(r *pb.SandboxRef) SandboxRef {
	if r == nil {
		return SandboxRef{}
	}
	return SandboxRef{Name: r.GetName(), ID: r.GetId(), Config: r.GetConfig()}
}

func infoToPB(in Info) *pb.InfoResponse {
	out := &pb.InfoResponse{
		Name:        in.Name,
		Version:     in.Version,
		Description: in.Description,
		Capabilities: &pb.Capabilities{
			Isolated:       in.Isolated,
			ExecAsRoot:     in.ExecAsRoot,
			ResourceLimits: in.ResourceLimits,
			Tty:            in.TTY,
			RunUsers:       in.RunUsers,
		},
	}
	for _, v := range in.APIVersions {
		out.ApiVersions = append(out.ApiVersions, uint32(v))
	}
	for _, m := range in.EgressModes {
		out.Capabilities.EgressModes = append(out.Capabilities.EgressModes, string(m))
	}
	return out
}

func infoFromPB(in *pb.InfoResponse) Info {
	c := in.GetCapabilities()
	out := Info{
		Name:        in.GetName(),
		Version:     in.GetVersion(),
		Description: in.GetDescription(),
		Capabilities: Capabilities{
			Isolated:       c.GetIsolated(),
			ExecAsRoot:     c.GetExecAsRoot(),
			ResourceLimits: c.GetResourceLimits(),
			TTY:            c.GetTty(),
			RunUsers:       c.GetRunUsers(),
		},
	}
	for _, v := range in.GetApiVersions() {
		out.APIVersions = append(out.APIVersions, int(v))
	}
	for _, m := range c.GetEgressModes() {
		out.EgressModes = append(out.EgressModes, NetworkMode(m))
	}
	return out
}

func specToPB(s Spec) *pb.EnsureRunningRequest {
	return &pb.EnsureRunningRequest{
		Ref:     refToPB(s.SandboxRef),
		Network: networkToPB(s.Network),
		Labels:  s.Labels,
	}
}

func specFromPB(r *pb.EnsureRunningRequest) Spec {
	return Spec{
		SandboxRef: refFromPB(r.GetRef()),
		Network:    networkFromPB(r.GetNetwork()),
		Labels:     r.GetLabels(),
	}
}

func networkToPB(n NetworkPolicy) *pb.NetworkPolicy {
	return &pb.NetworkPolicy{Mode: string(n.Mode), AllowedHosts: n.AllowedHosts}
}

func networkFromPB(n *pb.NetworkPolicy) NetworkPolicy {
	return NetworkPolicy{Mode: NetworkMode(n.GetMode()), AllowedHosts: n.GetAllowedHosts()}
}

func problemsToPB(ps []Problem) []*pb.SettingsProblem {
	out := make([]*pb.SettingsProblem, len(ps))
	for i, p := range ps {
		out[i] = &pb.SettingsProblem{Key: p.Key, Message: oneLine(p.Message)}
	}
	return out
}

func problemsFromPB(ps []*pb.SettingsProblem) []Problem {
	out := make([]Problem, len(ps))
	for i, p := range ps {
		out[i] = Problem{Key: p.GetKey(), Message: p.GetMessage()}
	}
	return out
}

func sandboxToPB(s Sandbox) *pb.EnsureRunningResponse {
	return &pb.EnsureRunningResponse{
		Ref: refToPB(s.Ref), Created: s.Created, Workdir: s.Workdir, Details: s.Details,
		WorkerDir: s.Worker.Dir, WorkerPreinstalled: s.Worker.Preinstalled,
	}
}

func sandboxFromPB(r *pb.EnsureRunningResponse) Sandbox {
	return Sandbox{
		Ref: refFromPB(r.GetRef()), Created: r.GetCreated(), Workdir: r.GetWorkdir(), Details: r.GetDetails(),
		Worker: WorkerPlace{Dir: r.GetWorkerDir(), Preinstalled: r.GetWorkerPreinstalled()},
	}
}

func listedToPB(l Listed) *pb.ListedSandbox {
	out := &pb.ListedSandbox{Ref: refToPB(l.Ref), Labels: l.Labels, State: string(l.State)}
	if !l.Created.IsZero() {
		out.Created = timestamppb.New(l.Created)
	}
	return out
}

func listedFromPB(l *pb.ListedSandbox) Listed {
	out := Listed{Ref: refFromPB(l.GetRef()), Labels: l.GetLabels(), State: HealthState(l.GetState())}
	if l.GetCreated() != nil {
		out.Created = l.GetCreated().AsTime()
	}
	return out
}

func execStartToPB(r ExecRequest, stdin bool) *pb.ExecStart {
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

func execStartFromPB(s *pb.ExecStart) ExecRequest {
	return ExecRequest{
		Sandbox:     refFromPB(s.GetSandbox()),
		Argv:        s.GetArgv(),
		Env:         s.GetEnv(),
		Dir:         s.GetDir(),
		User:        s.GetUser(),
		TTY:         s.GetTty(),
		Size:        TermSize{Rows: s.GetTermSize().GetRows(), Cols: s.GetTermSize().GetCols()},
		CancelGrace: s.GetCancelGrace().AsDuration(),
		Timeout:     s.GetTimeout().AsDuration(),
		Traffic:     Traffic(s.GetTraffic()),
	}
}

func exitToPB(e ExitStatus) *pb.ExitStatus {
	return &pb.ExitStatus{Code: int32(e.Code), Signal: e.Signal, Canceled: e.Canceled, TimedOut: e.TimedOut}
}

func exitFromPB(e *pb.ExitStatus) ExitStatus {
	return ExitStatus{Code: int(e.GetCode()), Signal: e.GetSignal(), Canceled: e.GetCanceled(), TimedOut: e.GetTimedOut()}
}
