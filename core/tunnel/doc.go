// Package tunnel is the host end of the tunnel that carries TCP connections
// made inside a sandbox to the host, over a single byte stream the host
// opened: the stdin and stdout of an `amelia-worker tunnel` exec, a yamux
// session. The sandbox end (a yamux client that listens on a loopback
// address inside the sandbox and opens one stream per accepted connection)
// and the wire format are in core/tunnel/sandboxend, which the worker
// links; this end accepts the streams and pipes each to the proxy on host
// loopback. The sandbox needs no route to the host, and every transport
// that can run a command can carry it. Where a provider can forward
// connections itself (sdk.Forwarder), Forward uses that instead.
package tunnel
