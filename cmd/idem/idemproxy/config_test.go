package idemproxy_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/idemproxy"
)

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// JSON and YAML files give the same routes.
func TestLoadConfigJSONAndYAML(t *testing.T) {
	js := writeFile(t, "p.json", `{"tenant":{"header":"X-Tenant-ID"},"routes":[{"route":"POST /orders","operation":"orders.create",
"key":"optional","exclude_fields":["meta.t"],"exclude_query":["_"],"fingerprint_headers":["X-Api-Version"],
"retention":"48h","lease":"5s","expired_lease":"hold","replay_headers":["Content-Type"],"wait_for_in_flight":"2s"}]}`)
	ym := writeFile(t, "p.yaml", `
tenant: {header: X-Tenant-ID}
routes:
  - route: POST /orders
    operation: orders.create
    key: optional
    exclude_fields: [meta.t]
    exclude_query: [_]
    fingerprint_headers: [X-Api-Version]
    retention: 48h
    lease: 5s
    expired_lease: hold
    replay_headers: [Content-Type]
    wait_for_in_flight: 2s
`)
	for _, f := range []string{js, ym} {
		_, routes, err := idemproxy.LoadConfig(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(routes) != 1 {
			t.Fatalf("%s: %d routes", f, len(routes))
		}
		r := routes[0]
		if r.Method != "POST" || r.Path != "/orders" || r.Operation != "orders.create" || !r.Optional ||
			r.Tenant.Header != "X-Tenant-ID" || r.Retention != 48*time.Hour || r.Lease != 5*time.Second ||
			r.ExpiredPolicy != idem.Hold || r.WaitForInFlight != 2*time.Second ||
			strings.Join(r.ExcludeFields, ",") != "meta.t" || strings.Join(r.ExcludeQuery, ",") != "_" ||
			strings.Join(r.FingerprintHeaders, ",") != "X-Api-Version" || strings.Join(r.ReplayHeaders, ",") != "Content-Type" {
			t.Fatalf("%s: route %+v", f, r)
		}
	}
}

// A misspelt option, a bad value or a missing secret is an error, never
// silently ignored.
func TestLoadConfigRejects(t *testing.T) {
	for name, c := range map[string]struct{ file, body string }{
		"unknown field yaml": {"a.yaml", "routes:\n  - route: POST /orders\n    expired_leas: hold\n"},
		"unknown field json": {"a.json", `{"routes":[{"route":"POST /orders","lease_time":"1s"}]}`},
		"bad policy":         {"a.yaml", "routes:\n  - route: POST /orders\n    expired_lease: sometimes\n"},
		"bad duration":       {"a.yaml", "routes:\n  - route: POST /orders\n    lease: soon\n"},
		"bad route":          {"a.yaml", "routes:\n  - route: orders\n"},
		"bad key":            {"a.yaml", "routes:\n  - route: POST /orders\n    key: maybe\n"},
		"secret unset":       {"a.yaml", "routes:\n  - route: POST /orders\n    tenant: {jwt: {hs256_secret_env: NOPE_UNSET}}\n"},
		"short secret":       {"a.yaml", "routes:\n  - route: POST /orders\n    tenant: {jwt: {hs256_secret_env: SHORT}}\n"},
		"header and jwt":     {"a.yaml", "routes:\n  - route: POST /orders\n    tenant: {header: X, jwt: {hs256_secret_env: SHORT}}\n"},
		"extension":          {"a.toml", "routes = []"},
	} {
		f := writeFile(t, c.file, c.body)
		_, _, err := idemproxy.LoadConfig(f, func(k string) string {
			if k == "SHORT" {
				return "short"
			}
			return ""
		})
		if !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: err %v, want ErrInvalidOption", name, err)
		}
	}
}

func TestParseRoute(t *testing.T) {
	for in, want := range map[string]idemproxy.Route{
		"POST /orders":                  {Method: "POST", Path: "/orders"},
		"POST /orders=orders.create":    {Method: "POST", Path: "/orders", Operation: "orders.create"},
		"/payments":                     {Path: "/payments"},
		"PATCH /accounts/{id}=acct.upd": {Method: "PATCH", Path: "/accounts/{id}", Operation: "acct.upd"},
	} {
		got, err := idemproxy.ParseRoute(in)
		if err != nil || got.Method != want.Method || got.Path != want.Path || got.Operation != want.Operation {
			t.Errorf("ParseRoute(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "post /orders", "POST orders", "POST"} {
		if _, err := idemproxy.ParseRoute(bad); err == nil {
			t.Errorf("ParseRoute(%q) accepted", bad)
		}
	}
}

// The sample routes file of the example stays valid.
func TestSampleConfigLoads(t *testing.T) {
	fc, routes, err := idemproxy.LoadConfig("../../../examples/upstream-node/proxy.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if fc.Upstream == "" || len(routes) != 2 || routes[0].Operation != "orders.create" || routes[0].ExpiredPolicy != idem.Hold ||
		routes[0].Tenant.Header != "X-Tenant-ID" || routes[1].Path != "/orders/{id}/refund" {
		t.Fatalf("sample config: %+v %+v", fc, routes)
	}
}

// Exact path matching is a per-route option of --route ("exact" after the
// path) and of the configuration file (exact_path), off by default.
func TestExactPathOption(t *testing.T) {
	for in, want := range map[string]idemproxy.Route{
		"POST /orders exact=create-order": {Method: "POST", Path: "/orders", Operation: "create-order", ExactPath: true},
		"POST /orders exact":              {Method: "POST", Path: "/orders", ExactPath: true},
		"/orders exact":                   {Path: "/orders", ExactPath: true},
		"POST /orders=exact":              {Method: "POST", Path: "/orders", Operation: "exact"},
		"POST /orders":                    {Method: "POST", Path: "/orders"},
	} {
		got, err := idemproxy.ParseRoute(in)
		if err != nil || got.Method != want.Method || got.Path != want.Path || got.Operation != want.Operation || got.ExactPath != want.ExactPath {
			t.Errorf("ParseRoute(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"exact", "POST /orders exactly", "POST /orders exact exact", "exact POST /orders"} {
		if _, err := idemproxy.ParseRoute(bad); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("ParseRoute(%q): %v, want ErrInvalidOption", bad, err)
		}
	}
	for name, body := range map[string]string{
		"p.yaml": "routes:\n  - route: POST /orders\n    exact_path: true\n  - route: POST /refunds\n  - route: POST /charges exact\n",
		"p.json": `{"routes":[{"route":"POST /orders","exact_path":true},{"route":"POST /refunds"},{"route":"POST /charges exact"}]}`,
	} {
		_, routes, err := idemproxy.LoadConfig(writeFile(t, name, body), nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(routes) != 3 || !routes[0].ExactPath || routes[1].ExactPath || !routes[2].ExactPath {
			t.Fatalf("%s: routes %+v, want exact, normalised, exact", name, routes)
		}
	}
}
