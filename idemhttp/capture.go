package idemhttp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
)

// capture buffers a handler's response so that nothing reaches the client
// before the key record (and, in transactional mode, the handler's
// mutations) committed. It implements Unwrap for http.ResponseController;
// Flush is a no-op and Hijack is refused, because both would bypass the
// buffering.
//
// The body is held in memory up to memLimit bytes; the rest is spilled to
// a temporary file (os.CreateTemp: mode 0600), which is unlinked as soon as
// it is created where the system allows it (so a crash leaves nothing
// behind) and closed, and removed otherwise, by close. Beyond maxBytes
// (when positive) writes fail with ErrResponseTooLarge.
type capture struct {
	rw     http.ResponseWriter
	header http.Header
	status int

	mem      bytes.Buffer // the first bytes of the body, at most memLimit
	file     *os.File     // the rest of the body, once spilled
	unlinked bool         // file was removed from its directory at creation
	size     int64        // body bytes written

	memLimit int
	maxBytes int64
	dir      string
	tooLarge bool  // a write went beyond maxBytes
	err      error // spilling failed
}

var errHijack = fmt.Errorf("idemhttp: cannot hijack an idempotent request's connection: %w", http.ErrNotSupported)

// sniffLen is how many bytes http.DetectContentType reads; the memory part
// of a capture always holds at least that many when the body has them.
const sniffLen = 512

func (m *Middleware[TTx]) newCapture(rw http.ResponseWriter) *capture {
	return &capture{rw: rw, header: make(http.Header), memLimit: max(m.cfg.MaxResponseMemory, sniffLen),
		maxBytes: m.cfg.MaxResponseBytes, dir: m.cfg.SpillDir}
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
	switch {
	case c.err != nil:
		return 0, c.err
	case c.tooLarge:
		return 0, ErrResponseTooLarge
	case c.maxBytes > 0 && c.size+int64(len(p)) > c.maxBytes:
		c.tooLarge = true
		return 0, ErrResponseTooLarge
	}
	n := 0
	if c.file == nil {
		n = min(len(p), c.memLimit-c.mem.Len())
		c.mem.Write(p[:n])
		c.size += int64(n)
		if n == len(p) {
			return n, nil
		}
		if err := c.spill(); err != nil {
			return n, err
		}
	}
	k, err := c.file.Write(p[n:])
	c.size += int64(k)
	if err != nil {
		c.err = fmt.Errorf("idemhttp: spill response body: %w", err)
		return n + k, c.err
	}
	return n + k, nil
}

func (c *capture) spill() error {
	f, err := os.CreateTemp(c.dir, "idemhttp-response-*")
	if err != nil {
		c.err = fmt.Errorf("idemhttp: spill response body: %w", err)
		return c.err
	}
	c.file = f
	c.unlinked = os.Remove(f.Name()) == nil // POSIX: the open file lives on, nameless
	return nil
}

// failure reports why the captured response cannot be recorded: it
// exceeded MaxResponseBytes, or spilling it failed.
func (c *capture) failure() error {
	switch {
	case c.tooLarge:
		return fmt.Errorf("%w: above %d bytes", ErrResponseTooLarge, c.maxBytes)
	case c.err != nil:
		return c.err
	}
	return nil
}

// close releases the spill file. Safe to call more than once.
func (c *capture) close() {
	if c.file == nil {
		return
	}
	_ = c.file.Close()
	if !c.unlinked {
		_ = os.Remove(c.file.Name())
	}
	c.file = nil
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
	if _, ok := c.header["Content-Type"]; !ok && c.size > 0 && c.header.Get("Transfer-Encoding") == "" {
		c.header.Set("Content-Type", http.DetectContentType(c.mem.Bytes()))
	}
}

// body returns the whole body when it is at most limit bytes; ok is false
// (and nothing is read) when it is longer.
func (c *capture) body(limit int) (b []byte, ok bool, err error) {
	if c.size > int64(limit) {
		return nil, false, nil
	}
	if c.file == nil {
		return c.mem.Bytes(), true, nil
	}
	b = make([]byte, c.size)
	n := copy(b, c.mem.Bytes())
	if _, err := c.file.ReadAt(b[n:], 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, false, fmt.Errorf("idemhttp: read spilled response body: %w", err)
	}
	return b, true, nil
}

// send writes the captured response to the client, streaming a spilled
// body from its file.
func (c *capture) send() {
	dst := c.rw.Header()
	for k, v := range c.header {
		dst[k] = v
	}
	c.rw.WriteHeader(c.status)
	if _, err := c.rw.Write(c.mem.Bytes()); err != nil || c.file == nil {
		return
	}
	if _, err := c.file.Seek(0, io.SeekStart); err == nil {
		_, _ = io.Copy(c.rw, c.file)
	}
}

var _ interface {
	http.ResponseWriter
	Unwrap() http.ResponseWriter
} = (*capture)(nil)
