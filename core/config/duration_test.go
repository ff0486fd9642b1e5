package config

import (
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	const day = 24 * time.Hour
	for _, c := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "90s", want: 90 * time.Second},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "14d", want: 14 * day},
		{in: " 7d ", want: 7 * day},
		{in: "1d12h", want: day + 12*time.Hour},
		{in: "0d", want: 0},
		{in: "d", bad: true},
		{in: "1.5d", bad: true},
		{in: "-1d", bad: true},
		{in: "+1d", bad: true},
		{in: "1d-1h", bad: true},
		{in: "1dd", bad: true},
		{in: "99999999d", bad: true},
		{in: "two weeks", bad: true},
	} {
		got, err := ParseDuration(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("ParseDuration(%q) = %v, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestFormatDays(t *testing.T) {
	for d, want := range map[time.Duration]string{
		14 * 24 * time.Hour: "14d",
		36 * time.Hour:      "36h",
		90 * time.Minute:    "1h30m",
	} {
		if got := FormatDays(d); got != want {
			t.Errorf("FormatDays(%v) = %q, want %q", d, got, want)
		}
		if back, err := ParseDuration(FormatDays(d)); err != nil || back != d {
			t.Errorf("ParseDuration(FormatDays(%v)) = %v, %v", d, back, err)
		}
	}
}

func TestRetention(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want time.Duration
	}{
		{yaml: "", want: DefaultRetention},
		{yaml: "retention: 3d\n", want: 3 * 24 * time.Hour},
		{yaml: "retention: 12h\n", want: 12 * time.Hour},
	} {
		p := mustProfile(t, mustLoad(t, "profiles:\n  dev:\n    "+c.yaml+"    sandbox: {provider: local}\n", nil), "dev")
		if p.Retention != c.want {
			t.Errorf("%q: retention %v, want %v", c.yaml, p.Retention, c.want)
		}
	}
}
