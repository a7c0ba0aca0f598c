package idemproxy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/idemproxy"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
)

// Graceful shutdown finishes an in-flight request within its grace (the
// answer is recorded); a request still running when the grace ends is
// cancelled: under re-execute its key is released (the retry executes),
// under hold it stays pending for the policy.
func TestProxyShutdown(t *testing.T) {
	up := nodeUpstream(t, 0)
	for _, c := range []struct {
		name    string
		policy  idem.ExpiredLease
		delayMs string
		grace   time.Duration
		status  int
		state   idemhttp.State // "" = no record
	}{
		{"finishes", idem.Retake, "300", 20 * time.Second, 201, idemhttp.StateCompleted},
		{"releases", idem.Retake, "60000", 200 * time.Millisecond, 503, ""},
		{"holds", idem.Hold, "60000", 200 * time.Millisecond, 503, idemhttp.StateInProgress},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := testdb.SQLite(t)
			p := startProxy(t, d, up.URL, idemproxy.Config{Routes: []idemproxy.Route{ordersRoute(c.policy)}})
			key := "shutdown-" + c.name
			before := executions(t, up).Executions
			res := make(chan answer, 1)
			go func() {
				a, err := sendErr(p.URL, call{key: key, tenant: "acme", body: `{}`, headers: map[string]string{"X-Upstream-Delay-Ms": c.delayMs}})
				if err != nil {
					t.Error(err)
				}
				res <- a
			}()
			up.WaitExecutions(t, before+1)
			if err := p.Proxy.Shutdown(p.srv, c.grace, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			a := <-res
			if a.status != c.status {
				t.Fatalf("status %d, want %d; body %s", a.status, c.status, a.body)
			}
			rec, err := idemhttp.Lookup(context.Background(), d, "acme", "orders.create", key)
			switch {
			case c.state == "":
				if !errors.Is(err, idem.ErrNotFound) {
					t.Fatalf("record %+v, %v; want released", rec, err)
				}
			case err != nil || rec.State != c.state:
				t.Fatalf("record %+v, %v; want %s", rec, err, c.state)
			}
			if c.status == 503 && !strings.Contains(a.body, idemproxy.TypeShuttingDown) {
				t.Fatalf("body %q, want %s", a.body, idemproxy.TypeShuttingDown)
			}
		})
	}
}
