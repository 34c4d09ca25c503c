//go:build unix

package transport

import (
	"net"
	"syscall"
)

// rawConn returns conn's socket for writes that do not wait (nil when it
// has none).
func rawConn(conn net.Conn) syscall.RawConn {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

// writeNoWait writes p to the socket as far as the socket takes it at
// once: n < len(p) with a nil error means the socket's buffer is full.
// It never waits for the socket to drain.
func writeNoWait(rc syscall.RawConn, p []byte) (n int, err error) {
	werr := rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			m, e := syscall.Write(int(fd), p[n:])
			switch {
			case e == syscall.EINTR:
				continue
			case e == syscall.EAGAIN:
				return true // full: the caller hands the rest on
			case e != nil:
				err = e
				return true
			case m <= 0:
				return true
			}
			n += m
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return n, err
}
