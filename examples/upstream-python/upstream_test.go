package upstreampython_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/idemkit/idem/cmd/idem/conform"
	"github.com/idemkit/idem/cmd/idem/idemproxy"
	upstreamnode "github.com/idemkit/idem/examples/upstream-node"
	upstreampython "github.com/idemkit/idem/examples/upstream-python"
	"github.com/idemkit/idem/internal/testdb"
)

// The Python service behind idem proxy passes every idem conform check,
// and its own counter shows one execution per key.
func TestPythonUpstreamBehindProxy(t *testing.T) {
	up := upstreamnode.Skipping(t, func() (*upstreamnode.Upstream, error) {
		return upstreampython.Start(context.Background(), 0)
	})
	u, _ := url.Parse(up.URL)
	p, err := idemproxy.New(testdb.SQLite(t), idemproxy.Config{Upstream: u, Routes: []idemproxy.Route{{
		Method: "POST", Path: "/orders", Operation: "orders.create", Tenant: idemproxy.TenantSource{Header: "X-Tenant-ID"}}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	defer srv.Close()
	rep, err := conform.Run(context.Background(), conform.Config{URL: srv.URL, TenantHeader: "X-Tenant-ID",
		Tenants: []string{"acme", "globex"}, FailHeader: http.Header{"X-Upstream-Fail": {"500"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Checks {
		if c.Result != conform.Pass {
			t.Errorf("%s: %s (%s)", c.Name, c.Result, c.Saw)
		}
	}
	c, err := up.Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// first call 1, concurrent retries 1, two tenants 2, the 500 and its retry 2.
	if c.Executions != 6 {
		t.Fatalf("upstream counts %+v, want 6 executions", c)
	}
	seen := false
	for k, n := range c.ByKey {
		if strings.HasSuffix(k, `-2"`) {
			seen = true
			if n != 1 {
				t.Fatalf("the concurrently retried key %s executed %d times, want once", k, n)
			}
		}
	}
	if !seen {
		t.Fatalf("the upstream never saw the concurrently retried key: counts %+v", c)
	}
}
