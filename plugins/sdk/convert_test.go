package sdk

import (
	"reflect"
	"testing"
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
