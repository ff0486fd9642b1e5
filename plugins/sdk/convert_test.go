package sdk

import (
	"bytes"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/amelia-sandbox/amelia/internal/providerwire/providerv1"
)

// Every field of Info crosses the wire both ways: a capability the
// conversion forgot would reach the host as false.
func TestInfoRoundTrip(t *testing.T) {
	t.Parallel()
	in := Info{
		Name: "p", Version: "1.2.3", APIVersions: []int{1}, Description: "a provider",
		Capabilities: Capabilities{
			EgressModes: []NetworkMode{NetworkOpen, NetworkNone},
			Isolated:    true, ExecAsRoot: true, ResourceLimits: true, TTY: true, RunUsers: true,
		},
	}
	if got := infoFromPB(infoToPB(in)); !reflect.DeepEqual(got, in) {
		t.Errorf("Info after the wire = %+v, want %+v", got, in)
	}
	// Each capability alone: none is carried by another's field.
	c := reflect.ValueOf(&in.Capabilities).Elem()
	for i := range c.NumField() {
		if c.Field(i).Kind() != reflect.Bool {
			continue
		}
		one := Info{Name: "p"}
		reflect.ValueOf(&one.Capabilities).Elem().Field(i).SetBool(true)
		if got := infoFromPB(infoToPB(one)); !reflect.DeepEqual(got.Capabilities, one.Capabilities) {
			t.Errorf("%s alone after the wire = %+v", c.Type().Field(i).Name, got.Capabilities)
		}
	}
}

// Field 12 of ExecStart was the bool "interactive": a plugin built before
// Traffic replaced it reads TrafficMessages as true, and its true as
// TrafficMessages.
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
	out, err := proto.Marshal(execStartToPB(ExecRequest{Traffic: TrafficMessages}, false))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, wire) {
		t.Errorf("TrafficMessages on the wire = %x, want it to hold interactive=true (%x)", out, wire)
	}
}
