package main

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/httpserver"
)

// TestDemoCutsTricklingBody: the demo's server (internal/httpserver) ends
// a request whose body arrives one byte a second within its ReadTimeout
// (30s); the old server kept such a connection open indefinitely. The
// bound asserted is the timeout plus a generous margin for a loaded
// machine.
func TestDemoCutsTricklingBody(t *testing.T) {
	if testing.Short() {
		t.Skip("takes httpserver.ReadTimeout (30s)")
	}
	t.Parallel()
	url, stop := startDemo(t)
	defer func() { _ = stop() }()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if _, err := io.WriteString(conn, "POST /orders HTTP/1.1\r\nHost: demo\r\nIdempotency-Key: slow-1\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	limit := httpserver.ReadTimeout + 30*time.Second
	_ = conn.SetReadDeadline(start.Add(limit))
	_, err = io.ReadAll(conn) // a response, then the close; or just the close
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the trickling request was still open after %s (ReadTimeout %s)", time.Since(start).Round(time.Second), httpserver.ReadTimeout)
	}
	t.Logf("connection ended after %s", time.Since(start).Round(100*time.Millisecond))
}
