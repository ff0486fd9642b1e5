package pluginclient

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Field 12 of ExecStart was the bool "interactive": a plugin built before
// Traffic replaced it reads TrafficMessages as true. (The plugin's side of
// the field is plugins/sdk's test.)
func TestTrafficWritesTheOldInteractiveBool(t *testing.T) {
	t.Parallel()
	wire := protowire.AppendVarint(protowire.AppendTag(nil, 12, protowire.VarintType), 1)
	out, err := proto.Marshal(execStartToPB(sdk.ExecRequest{Traffic: sdk.TrafficMessages}, false))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, wire) {
		t.Errorf("TrafficMessages on the wire = %x, want it to hold interactive=true (%x)", out, wire)
	}
}
