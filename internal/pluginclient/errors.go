package pluginclient

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// kindOf is the SDK sentinel each gRPC code comes back as: the plugin's
// Serve sends each sentinel as its code (and gRPC's own codes mean what
// they say).
var kindOf = map[codes.Code]error{
	codes.NotFound:           sdk.ErrNotFound,
	codes.InvalidArgument:    sdk.ErrInvalid,
	codes.Unavailable:        sdk.ErrUnavailable,
	codes.Unimplemented:      sdk.ErrUnsupported,
	codes.PermissionDenied:   sdk.ErrPermission,
	codes.Unauthenticated:    sdk.ErrPermission,
	codes.FailedPrecondition: sdk.ErrConflict,
	codes.AlreadyExists:      sdk.ErrConflict,
	codes.DeadlineExceeded:   sdk.ErrTimeout,
	codes.Canceled:           context.Canceled,
}

// fromStatus turns a gRPC error back into an error matching the SDK's
// sentinels, keeping the provider's message.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.Unknown, codes.Internal:
		return errors.New(st.Message())
	}
	if kind, ok := kindOf[st.Code()]; ok {
		return sdk.Errorf(kind, "%s", st.Message())
	}
	return sdk.Errorf(sdk.ErrUnavailable, "%s", st.Message())
}
