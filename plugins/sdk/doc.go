// Package sdk is the contract between Amelia and a sandbox provider, and
// the whole of what a provider author reads: what to implement (Provider
// and its optional interfaces), the types that cross the boundary, the
// errors, Serve, and the settings decoder. Its sub-package sdktest is the
// conformance kit. Nothing else is needed; examples/provider-hello, a
// complete provider in a module of its own, imports nothing else.
//
// # A provider
//
// A provider turns a profile into a running sandbox and runs processes in
// it. It is a program of its own, which Amelia finds on its plugin path as
// amelia-provider-NAME, starts, and talks to over gRPC (hashicorp
// go-plugin); its main is one line:
//
//	func main() { sdk.Serve(myprovider.New()) }
//
// Serve does the rest: the handshake, the gRPC server, validating every
// request before it reaches the provider (sandbox names, argv, network
// modes), the bounds on HealthCheck, cancelling execs when the host goes,
// and, where the host offers one, a data channel that carries exec bytes
// beside gRPC at pipe speed (ExecIO's streams are then PipeReader and
// PipeWriter). A provider only moves bytes and manages lifecycles: files,
// git, tunnels and the agent are Amelia's, built on Exec, so they work on
// every provider.
//
// # What to implement
//
// Provider has five methods: Info (name, version, Capabilities),
// EnsureRunning (start or reuse the sandbox a Spec names; idempotent,
// also from several processes at once), Exec (one process, its I/O
// streamed; a non-zero exit is an ExitStatus, not an error), Teardown
// (idempotent) and HealthCheck (within HealthCheckTimeout). Its doc says
// the rules each must keep; the one that matters most is failing closed:
// what a provider cannot do as asked (a network mode it cannot enforce, a
// TTY or root it did not declare, a user it cannot run as) it refuses with
// ErrUnsupported, and never does something else instead.
//
// A provider may also implement SettingsValidator (check a profile's
// settings before anything starts; every provider should), Lister (find
// its sandboxes by label, so orphans can be removed), Preflighter (say why
// EnsureRunning would fail, changing nothing), Forwarder (carry
// connections from the sandbox back to the host itself), Preparer
// (keep the result of a sandbox's setup commands, Spec.Setup, as an image
// or snapshot its sandboxes start from) and Archiver (move a tar stream
// into and out of the sandbox's file system without an exec, for big
// files); the host is told
// ErrUnsupported for one it lacks. Implementing io.Closer cleans up when
// the plugin stops.
//
// # Errors
//
// Errors wrap the sentinels (ErrNotFound, ErrInvalid, ErrUnavailable,
// ErrUnsupported, ErrPermission, ErrConflict, ErrTimeout), with
// fmt.Errorf("...: %w", sdk.ErrNotFound) or Errorf. They cross the plugin
// boundary as gRPC codes and come back out matching them with errors.Is,
// with the provider's message.
//
// # Settings
//
// A profile's block for the provider reaches it as SandboxRef.Config, raw
// JSON. DecodeSettings reads it strictly (an unknown key is an error naming
// it and the known ones) and reports every problem at its key path;
// InvalidSetting reports a bad value at its key; SettingsProblems turns
// either into what ValidateSettings answers. JoinKey and
// UnknownKeyMessage word problems the same way for a provider that checks
// more itself.
//
// # Logs
//
// A plugin logs to its stderr with NewLogger, whose records reach the
// host's log with their level and attributes; Progress marks a record as
// progress the user sees while waiting (a sandbox being created).
//
// # Testing
//
// sdktest.Run drives a provider through the real gRPC shim, as a plugin
// subprocess exactly as Amelia runs it (or, given a Provider value, served
// in the test process with ServeListener), and checks every rule above,
// each failure naming the rule and the usual fix. A test binary can be its
// own plugin: in TestMain, when sdktest.LaunchedAsPlugin, call main.
//
// # The toolkit
//
// The sub-packages of sdk/toolkit are optional code Amelia's own providers
// share, public for a third party's: an SSH transport, commands through sh
// that can be found and killed, the worker's exec envelope, process trees
// on the host, stream joining, the worker binaries. None is part of the
// contract; see package toolkit.
//
// # The wire
//
// The gRPC API is plugins/sdk/providerv1/provider.proto (package
// amelia.provider.v1), for plugins written in other languages; a Go
// provider never sees its messages. APIVersion is its version, which is
// also the go-plugin protocol version.
package sdk
