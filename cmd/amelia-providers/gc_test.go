package main

import "testing"

func TestGCPercent(t *testing.T) {
	for _, c := range []struct {
		name   string
		gogc   string
		set    bool
		want   int
		wantOK bool
	}{
		{"unset", "", false, streamGCPercent, true},
		{"empty", "", true, streamGCPercent, true},
		{"the user's", "50", true, 0, false},
		{"off", "off", true, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, ok := gcPercent(c.gogc, c.set); got != c.want || ok != c.wantOK {
				t.Errorf("gcPercent(%q, %v) = %d, %v; want %d, %v", c.gogc, c.set, got, ok, c.want, c.wantOK)
			}
		})
	}
}
