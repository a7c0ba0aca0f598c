package httpserver_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/httpserver"
)

// TestNewSetsTimeouts: every server New builds bounds headers, the whole
// request (so a trickling body is cut within 30 s), the response and idle
// keep-alives.
func TestNewSetsTimeouts(t *testing.T) {
	t.Parallel()
	h := http.NotFoundHandler()
	srv := httpserver.New("127.0.0.1:0", h)
	if srv.Addr != "127.0.0.1:0" || srv.Handler == nil {
		t.Fatalf("addr %q handler %v", srv.Addr, srv.Handler)
	}
	for name, d := range map[string]time.Duration{
		"ReadHeaderTimeout": srv.ReadHeaderTimeout, "ReadTimeout": srv.ReadTimeout,
		"WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout,
	} {
		if d <= 0 {
			t.Errorf("%s is %v: unbounded", name, d)
		}
	}
	if srv.ReadTimeout > 30*time.Second {
		t.Errorf("ReadTimeout %v: a trickling body may stay open longer than 30s", srv.ReadTimeout)
	}
	if srv.ReadHeaderTimeout > srv.ReadTimeout {
		t.Errorf("ReadHeaderTimeout %v above ReadTimeout %v", srv.ReadHeaderTimeout, srv.ReadTimeout)
	}
}

// TestTrickleIsCut: a client that announces a 100-byte body and sends one
// byte every 500ms (50 s for the whole body) is cut off by ReadTimeout,
// here lowered to 1 s to keep the test short: the handler's read fails and
// the server closes the connection long before the body is complete.
func TestTrickleIsCut(t *testing.T) {
	t.Parallel()
	readErr := make(chan error, 1)
	srv := httpserver.New("", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
		if err != nil {
			http.Error(w, "body too slow", http.StatusRequestTimeout)
		}
	}))
	srv.ReadTimeout = time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST / HTTP/1.1\r\nHost: idem\r\nContent-Length: 100\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { // the server closing the connection ends this read
		_, _ = io.Copy(io.Discard, conn)
		close(closed)
	}()
	var sent atomic.Int64
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(30 * time.Second)
	for {
		select {
		case <-closed:
			if n := sent.Load(); n >= 100 {
				t.Fatalf("the whole body (%d bytes) got through before the cut", n)
			}
			select {
			case err := <-readErr:
				var ne net.Error
				if err == nil || !(errors.As(err, &ne) && ne.Timeout()) {
					t.Fatalf("the handler's body read ended with %v, want a time-out", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the handler's body read did not end")
			}
			return
		case <-giveUp:
			t.Fatalf("a trickling body was still open after 30s (%d bytes sent)", sent.Load())
		case <-tick.C:
			if sent.Load() < 100 {
				if _, err := conn.Write([]byte("x")); err == nil {
					sent.Add(1)
				}
			}
		}
	}
}
