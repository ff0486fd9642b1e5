package sdk

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/amelia-sandbox/amelia/internal/providerwire/providerv1"
)

// Conversions between the SDK's types and the wire messages, on the
// plugin's side: requests in, answers out. (The host's client,
// internal/pluginclient, has the other direction.)

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
			Archive:        in.Archive,
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

func specFromPB(r *pb.EnsureRunningRequest) Spec {
	return Spec{
		SandboxRef: refFromPB(r.GetRef()),
		Network:    networkFromPB(r.GetNetwork()),
		Labels:     r.GetLabels(),
		Setup:      setupFromPB(r.GetSetup()),
		Lifetime: Lifetime{
			IdleTimeout: time.Duration(r.GetIdleTimeoutMs()) * time.Millisecond,
			MaxLifetime: time.Duration(r.GetMaxLifetimeMs()) * time.Millisecond,
		},
	}
}

func setupFromPB(cs []*pb.SetupCommand) []SetupCommand {
	if len(cs) == 0 {
		return nil
	}
	out := make([]SetupCommand, len(cs))
	for i, c := range cs {
		out[i] = SetupCommand{Name: c.GetName(), Argv: c.GetArgv()}
	}
	return out
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

func sandboxToPB(s Sandbox) *pb.EnsureRunningResponse {
	return &pb.EnsureRunningResponse{
		Ref: refToPB(s.Ref), Created: s.Created, Workdir: s.Workdir, Details: s.Details,
		WorkerDir: s.Worker.Dir, WorkerPreinstalled: s.Worker.Preinstalled,
	}
}

func listedToPB(l Listed) *pb.ListedSandbox {
	out := &pb.ListedSandbox{Ref: refToPB(l.Ref), Labels: l.Labels, State: string(l.State)}
	if !l.Created.IsZero() {
		out.Created = timestamppb.New(l.Created)
	}
	return out
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
