//go:build !unix

package sdk

import (
	"errors"
	"os"
)

// guardStdout is only implemented on unix; elsewhere stdout stays as it is.
func guardStdout() (*os.File, error) {
	return nil, errors.New("stdout guard is not supported on this platform")
}
