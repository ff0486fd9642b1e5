//go:build !unix

package datachan

import (
	"errors"
	"net"
	"os"
)

// Offer: no socket pairs here, so no data channel.
func Offer() (host, child *os.File, err error) {
	return nil, nil, errors.New("no data channel on this system")
}

// Connect is never reached without Offer.
func Connect(host *os.File) (*Host, error) { return nil, nil }

// Accept: no data channel on this system.
func Accept() (*Plugin, error) {
	os.Unsetenv(Env)
	return nil, nil
}

// Decline: no data channel on this system.
func Decline() { os.Unsetenv(Env) }

// Take: no data channel on this system.
func Take(f *os.File) (*Plugin, error) {
	_ = f.Close()
	return nil, errors.New("no data channel on this system")
}

func send(*net.UnixConn, []byte, []*os.File) error {
	return errors.New("no data channel on this system")
}

func recv(*net.UnixConn) (uint64, Files, error) {
	return 0, nil, errors.New("no data channel on this system")
}

// dupFile: never reached without a data channel.
func dupFile(f *os.File) (*os.File, error) { return nil, errors.New("no data channel on this system") }
