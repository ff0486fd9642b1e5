package sdk

import (
	"net"
	"time"
)

// Closest is closest, for the tests of its edit distance.
var Closest = closest

// ServeListenerBounded is ServeListener with HealthCheck bounded by
// healthTimeout instead of HealthCheckTimeout.
func ServeListenerBounded(p Provider, lis net.Listener, healthTimeout time.Duration) (stop func()) {
	srv := newServer(p)
	srv.healthTimeout = healthTimeout
	return serveListener(srv, lis)
}
