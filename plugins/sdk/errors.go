package sdk

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors a provider wraps (fmt.Errorf("...: %w", sdk.ErrNotFound) or
// sdk.Errorf) so the host can tell failures apart. They cross the plugin
// boundary as gRPC status codes and come back out as errors that match them
// with errors.Is and keep the provider's message.
var (
	// ErrNotFound: the sandbox (or something in it) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the request or the provider settings are wrong.
	ErrInvalid = errors.New("invalid argument")
	// ErrUnavailable: the provider cannot reach its backend (daemon down,
	// host unreachable), or the plugin itself went away.
	ErrUnavailable = errors.New("unavailable")
	// ErrUnsupported: the provider cannot do what was asked (an egress mode
	// it cannot enforce, a TTY, an optional operation).
	ErrUnsupported = errors.New("unsupported")
	// ErrPermission: the backend refused the credentials or the operation.
	ErrPermission = errors.New("permission denied")
	// ErrConflict: the sandbox is in a state that does not allow this.
	ErrConflict = errors.New("conflict")
	// ErrTimeout: the operation did not finish in time.
	ErrTimeout = errors.New("timed out")
)

// codeOf is the gRPC code each sentinel crosses the plugin boundary as.
// (The host's client, internal/pluginclient, maps codes back.)
var codeOf = []struct {
	err  error
	code codes.Code
}{
	{ErrNotFound, codes.NotFound},
	{ErrInvalid, codes.InvalidArgument},
	{ErrUnavailable, codes.Unavailable},
	{ErrUnsupported, codes.Unimplemented},
	{ErrPermission, codes.PermissionDenied},
	{ErrConflict, codes.FailedPrecondition},
	{ErrTimeout, codes.DeadlineExceeded},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
}

// Errorf returns an error with the formatted message that matches kind with
// errors.Is: sdk.Errorf(sdk.ErrNotFound, "sandbox %q does not exist", name).
func Errorf(kind error, format string, args ...any) error {
	return &kindError{msg: fmt.Sprintf(format, args...), kind: kind}
}

// kindError carries a message and the sentinel it matches. It is what
// Errorf makes.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// toStatus turns a provider error into the gRPC status that carries it.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, c := range codeOf {
		if errors.Is(err, c.err) {
			return status.Error(c.code, err.Error())
		}
	}
	return status.Error(codes.Unknown, err.Error())
}
