package worker

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/ptyframe"
)

// openPTY opens a new terminal of size: its master end and the terminal.
func openPTY(size ptyframe.Size) (ptmx, pts *os.File, err error) {
	ptmx, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	fd := int(ptmx.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		ptmx.Close()
		return nil, nil, fmt.Errorf("unlock the terminal: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		ptmx.Close()
		return nil, nil, fmt.Errorf("number the terminal: %w", err)
	}
	pts, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		ptmx.Close()
		return nil, nil, fmt.Errorf("open the terminal: %w", err)
	}
	if err := setSize(ptmx, size); err != nil {
		ptmx.Close()
		pts.Close()
		return nil, nil, err
	}
	return ptmx, pts, nil
}

// setSize sets the terminal's size (nothing for a zero one); its
// foreground process group gets SIGWINCH.
func setSize(ptmx *os.File, size ptyframe.Size) error {
	if size.Rows == 0 || size.Cols == 0 {
		return nil
	}
	if err := unix.IoctlSetWinsize(int(ptmx.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols}); err != nil {
		return fmt.Errorf("size the terminal: %w", err)
	}
	return nil
}
