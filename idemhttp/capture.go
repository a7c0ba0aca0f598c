package idemhttp

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
)

// capture buffers a handler's response so that nothing reaches the client
// before the key record (and, in transactional mode, the handler's
// mutations) committed. It implements Unwrap for http.ResponseController;
// Flush is a no-op and Hijack is refused, because both would bypass the
// buffering.
type capture struct {
	rw     http.ResponseWriter
	header http.Header
	status int
	body   bytes.Buffer
}

var errHijack = fmt.Errorf("idemhttp: cannot hijack an idempotent request's connection: %w", http.ErrNotSupported)

func newCapture(rw http.ResponseWriter) *capture {
	return &capture{rw: rw, header: make(http.Header)}
}

// Header implements http.ResponseWriter.
func (c *capture) Header() http.Header { return c.header }

// WriteHeader implements http.ResponseWriter. 1xx responses are dropped.
func (c *capture) WriteHeader(code int) {
	if c.status != 0 || code < 200 {
		return
	}
	c.status = code
}

// Write implements http.ResponseWriter.
func (c *capture) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	return c.body.Write(p)
}

// Unwrap returns the underlying writer (for http.ResponseController).
func (c *capture) Unwrap() http.ResponseWriter { return c.rw }

// FlushError is a no-op: the response is held until the commit.
func (c *capture) FlushError() error { return nil }

// Flush is a no-op: the response is held until the commit.
func (c *capture) Flush() {}

// Hijack is refused.
func (c *capture) Hijack() (net.Conn, *bufio.ReadWriter, error) { return nil, nil, errHijack }

// finish fixes the status and Content-Type the way net/http would when
// sending, so the stored copy equals what the client receives.
func (c *capture) finish() {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if _, ok := c.header["Content-Type"]; !ok && c.body.Len() > 0 && c.header.Get("Transfer-Encoding") == "" {
		c.header.Set("Content-Type", http.DetectContentType(c.body.Bytes()))
	}
}

// send writes the captured response to the client.
func (c *capture) send() {
	dst := c.rw.Header()
	for k, v := range c.header {
		dst[k] = v
	}
	c.rw.WriteHeader(c.status)
	_, _ = c.rw.Write(c.body.Bytes())
}

var _ interface {
	http.ResponseWriter
	Unwrap() http.ResponseWriter
} = (*capture)(nil)
