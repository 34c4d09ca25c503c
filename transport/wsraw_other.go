//go:build !unix

package transport

import (
	"errors"
	"net"
	"syscall"
)

// rawConn: writes that do not wait are unix-only; elsewhere every frame
// goes through a sender goroutine.
func rawConn(net.Conn) syscall.RawConn { return nil }

// writeNoWait is never called where rawConn is nil.
func writeNoWait(syscall.RawConn, []byte) (int, error) {
	return 0, errors.ErrUnsupported
}
