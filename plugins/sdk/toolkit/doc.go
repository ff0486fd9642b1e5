// Package toolkit holds nothing itself: its sub-packages are an optional
// toolkit for provider authors, outside the provider contract.
//
// The contract is package sdk (what a provider implements, Serve, the
// settings decoder, the errors) and sdk/sdktest (the conformance kit). A
// provider needs nothing else, and examples/provider-hello imports nothing
// else. The toolkit is code Amelia's own providers share, public because a
// third party's provider may want the same:
//
//   - sshtransport: an SSH connection to a remote machine (jump hosts,
//     verified host keys, agent and key-file authentication, sessions
//     within MaxSessions, exec with cancellation, remote forwards).
//   - shexec: a sandbox command run through sh so that the provider can
//     find and kill everything it starts, on transports (docker exec, an
//     SSH session) that leave a cancelled command running.
//   - envelope: the worker's exec envelope, for transports that lose
//     stderr or exit statuses (as Daytona's SSH gateway does): its client
//     end, for a provider (the worker is its in-sandbox end).
//   - hostproc: an exec as a process tree on the provider's own machine,
//     killed whole on cancel.
//   - netpipe: joining two byte streams, as a Forwarder does with each
//     connection (also the host's and the worker's ends of the exec
//     tunnel).
//   - workerbin: the amelia-worker binaries on the host, for a provider
//     that puts the worker into its sandboxes itself.
//
// These packages are versioned with the SDK but are no part of its
// compatibility promise to the host: a provider that uses them is a
// provider like any other on the wire.
package toolkit
