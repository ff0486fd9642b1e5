package config

import (
	"strings"
	"time"
)

// lifetimeKey is sandbox.idle_timeout or sandbox.max_lifetime: a duration
// of at least MinLifetimeDuration, or off (also 0) for no bound. dst picks
// the field it sets.
func lifetimeKey(key string, dst func(*Sandbox) **time.Duration) field[Sandbox] {
	return field[Sandbox]{
		key: key,
		decode: func(d *decoder, at path, v any, sb *Sandbox) {
			if v == nil {
				return
			}
			if t, ok := d.lifetime(at, v); ok {
				*dst(sb) = &t
			}
		},
		show: func(_ *shower, _ path, sb *Sandbox) any {
			t := *dst(sb)
			switch {
			case t == nil:
				return nil
			case *t == 0:
				return "off"
			}
			return t.String()
		},
	}
}

func idleTimeout(sb *Sandbox) **time.Duration { return &sb.IdleTimeout }
func maxLifetime(sb *Sandbox) **time.Duration { return &sb.MaxLifetime }

// lifetime converts a non-nil value to a lifetime bound: 0 for off (the
// word, or zero), else a duration of at least MinLifetimeDuration.
func (d *decoder) lifetime(at path, v any) (time.Duration, bool) {
	if n, ok := v.(int); ok && n == 0 {
		return 0, true
	}
	if s, ok := v.(string); ok {
		x, ok := d.expand(at, s)
		if !ok {
			return 0, false
		}
		switch strings.ToLower(strings.TrimSpace(x.val)) {
		case "off", "0":
			return 0, true
		}
	}
	if _, ok := v.(string); !ok {
		d.problemf(at, "must be a duration (%s) or off, got %s", durationHint, typeName(v))
		return 0, false
	}
	t, ok := d.duration(at, v)
	if !ok {
		return 0, false
	}
	if t < MinLifetimeDuration {
		d.problemf(at, "%s is shorter than %s: use a longer duration, or off", t, MinLifetimeDuration)
		return 0, false
	}
	return t, true
}
