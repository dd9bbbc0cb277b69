package server

import (
	"bufio"
	"io"
	"net"
)

// connReadBuffer is the read buffer of a plaintext connection: a
// maximum-size HTTP/2 frame (16 KiB) with its header fits, so a burst of
// small frames is one read.
const connReadBuffer = 16<<10 + 9

// readBufferedListener hands out plaintext connections whose reads go
// through a buffer.
//
// net/http's HTTP/2 server reads a cleartext (h2c) connection's frames
// straight from the socket: each frame's 9-byte header, then its payload,
// two system calls a frame. A worker stream is mostly small frames (its
// batched completions, and a pair of flow-control WINDOW_UPDATEs for every
// 4 KiB of tasks it reads), so those reads were about a third of the
// broker's system calls. TLS needs none of this: a TLS connection reads
// whole records into its own buffer. HTTP/1 reads through its own buffer
// already, so the extra one costs it a copy.
type readBufferedListener struct{ net.Listener }

func (l readBufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err // as it is: net/http retries a temporary Accept error
	}
	return &readBufferedConn{Conn: c, r: bufio.NewReaderSize(c, connReadBuffer)}, nil
}

// readBufferedConn reads through r; writes, deadlines and closing go to the
// connection. net/http reads a connection from one goroutine at a time, so
// the buffer needs no lock.
type readBufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *readBufferedConn) Read(p []byte) (int, error) {
	return c.r.Read(p)
}

// CloseWrite half-closes a TCP connection, as net/http does before closing
// an HTTP/1 connection so the client reads the response before a reset.
func (c *readBufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ReadFrom keeps the socket's own ReadFrom (sendfile and splice) for
// responses served from files.
func (c *readBufferedConn) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(c.Conn, r)
}
