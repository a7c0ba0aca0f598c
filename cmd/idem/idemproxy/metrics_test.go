package idemproxy_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/idemproxy"
	"github.com/idemkit/idem/idemmetrics"
	"github.com/idemkit/idem/idemmetrics/idemmetricstest"
	"github.com/idemkit/idem/internal/testdb"
)

// *idemmetrics.Metrics is the proxy's Observer.
var _ idemproxy.Observer = (*idemmetrics.Metrics)(nil)

// The proxy counts executions, replays, rejections, pass-throughs and
// upstream errors, and reports replays and conflicts through idemmetrics.
func TestProxyMetrics(t *testing.T) {
	up := nodeUpstream(t, 0)
	reg := prometheus.NewRegistry()
	m, err := idemmetrics.New(reg, idemmetrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := testdb.SQLite(t)
	p := startProxy(t, d, up.URL, idemproxy.Config{Routes: []idemproxy.Route{ordersRoute(idem.Retake)}, Metrics: m, Registerer: reg})
	wantStatus(t, send(t, p.URL, call{key: "m", tenant: "acme", body: `{}`}), 201)
	wantStatus(t, send(t, p.URL, call{key: "m", tenant: "acme", body: `{}`}), 201)
	wantStatus(t, send(t, p.URL, call{key: "m", tenant: "acme", body: `{"x":1}`}), 422)
	wantStatus(t, send(t, p.URL, call{tenant: "acme", body: `{}`}), 400)
	wantStatus(t, send(t, p.URL, call{path: "/healthz", body: `{}`}), 404) // POST /healthz: passthrough
	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"idem_proxy_requests_total", "operation=orders.create,outcome=executed", 1},
		{"idem_proxy_requests_total", "operation=orders.create,outcome=replayed", 1},
		{"idem_proxy_requests_total", "operation=orders.create,outcome=rejected", 2},
		{"idem_proxy_requests_total", "operation=passthrough,outcome=passthrough", 1},
		{"idem_duplicates_suppressed_total", "component=proxy,consumer=orders.create", 1},
		{"idem_fingerprint_conflicts_total", "component=proxy,consumer=orders.create", 1},
		{"idem_proxy_in_flight", "", 0},
	} {
		if got := idemmetricstest.Value(t, reg, c.name, c.labels); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}
