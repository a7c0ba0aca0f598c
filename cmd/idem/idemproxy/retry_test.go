package idemproxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/idemproxy"
	"github.com/idemkit/idem/internal/testdb"
)

// breakingUpstream answers its first request on a connection and then,
// for the next one on the same (reused) connection, reads it whole and
// closes the connection without an answer: the request may have taken
// effect. It counts the requests it read per key.
type breakingUpstream struct {
	ln    net.Listener
	mu    sync.Mutex
	byKey map[string]int
}

func newBreakingUpstream(t *testing.T) *breakingUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &breakingUpstream{ln: ln, byKey: map[string]int{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return u
}

func (u *breakingUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for n := 0; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		u.mu.Lock()
		u.byKey[req.Header.Get("Idempotency-Key")]++
		u.mu.Unlock()
		if n > 0 {
			return // executed, then the connection broke
		}
		_, _ = io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	}
}

func (u *breakingUpstream) count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.byKey[key]
}

// A keyed request whose reused upstream connection breaks after the
// request was written is never re-sent by the transport behind the
// route's back (with and without a body): the proxy answers 502 and the
// key is left to the expired-lease policy.
func TestProxyNeverResendsAKeyedRequest(t *testing.T) {
	for _, body := range []string{`{"sku":"a"}`, ``} {
		up := newBreakingUpstream(t)
		d := testdb.SQLite(t)
		p := startProxy(t, d, "http://"+up.ln.Addr().String(), idemproxy.Config{Routes: []idemproxy.Route{ordersRoute(idem.Hold)}})
		wantStatus(t, send(t, p.URL, call{key: "warm", tenant: "acme", body: body}), 201)
		a := send(t, p.URL, call{key: "broken", tenant: "acme", body: body})
		if a.status != 502 || !strings.Contains(a.body, idemproxy.TypeUpstreamOutcomeUnknown) {
			t.Fatalf("body %q: answer %d %s, want 502 %s", body, a.status, a.body, idemproxy.TypeUpstreamOutcomeUnknown)
		}
		if n := up.count(`"broken"`); n != 1 {
			t.Fatalf("body %q: the upstream received the keyed request %d times, want once", body, n)
		}
	}
}
