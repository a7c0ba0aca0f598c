package upstreamnode

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// StartTest starts the service for t on port (0: any free one), stopped
// when t ends; it skips t with a message when node is not on PATH.
func StartTest(t testing.TB, port int) *Upstream {
	t.Helper()
	return Skipping(t, func() (*Upstream, error) { return Start(context.Background(), port) })
}

// Skipping runs start for t: it skips t with a message when the
// interpreter is not on PATH, fails t on any other error, and stops the
// service when t ends.
func Skipping(t testing.TB, start func() (*Upstream, error)) *Upstream {
	t.Helper()
	u, err := start()
	if errors.Is(err, ErrNotInstalled) {
		t.Skipf("%v: skipping the tests against this example upstream", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Stop)
	return u
}

// FreePort returns a loopback TCP port that was free a moment ago, for a
// service that must come back on the same port after a crash.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// WaitExecutions waits until the service has counted at least n
// executions (a request is counted on arrival, so this is how a test
// knows the upstream holds it); it fails t after 30s.
func (u *Upstream) WaitExecutions(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := u.Count(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if c.Executions >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream counted %d executions in 30s, want %d", c.Executions, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
