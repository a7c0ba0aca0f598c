package conform_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/idemkit/idem/conform"
	upstreamnode "github.com/idemkit/idem/examples/upstream-node"
	"github.com/idemkit/idem/idemproxy"
	"github.com/idemkit/idem/internal/testdb"
)

// Every check passes against idem proxy in front of the Node.js upstream,
// the 5xx check through the upstream's X-Upstream-Fail header.
func TestConformPassesAgainstIdemProxy(t *testing.T) {
	up := upstreamnode.StartTest(t, 0)
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
	if rep.Passed != len(conform.Checks) {
		t.Fatalf("%d passed, want %d", rep.Passed, len(conform.Checks))
	}
}
