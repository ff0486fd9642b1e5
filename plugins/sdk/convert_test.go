package sdk

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/amelia-sandbox/amelia/internal/providerwire/providerv1"
)

// Field 12 of ExecStart was the bool "interactive": a plugin reads the true
// of a host built before Traffic replaced it as TrafficMessages (the
// host's client writes it: internal/pluginclient's test).
func TestTrafficReadsTheOldInteractiveBool(t *testing.T) {
	t.Parallel()
	wire := protowire.AppendVarint(protowire.AppendTag(nil, 12, protowire.VarintType), 1)
	var s pb.ExecStart
	if err := proto.Unmarshal(wire, &s); err != nil {
		t.Fatal(err)
	}
	if got := execStartFromPB(&s).Traffic; got != TrafficMessages {
		t.Errorf("interactive=true read as %v, want TrafficMessages", got)
	}
}
