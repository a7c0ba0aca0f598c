package conform_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/cmd/idem/conform"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// Every check passes against idemhttp's middleware (both modes, tenant
// from a header, on every driver) in front of a handler that fails with
// 500 when asked to.
func TestConformPassesAgainstTheMiddleware(t *testing.T) {
	for _, mode := range []idemhttp.Mode{idemhttp.TwoPhase, idemhttp.Transactional} {
		t.Run(mode.String(), func(t *testing.T) {
			testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { conformMiddleware(t, d.D, mode) })
		})
	}
}

func conformMiddleware(t *testing.T, d store.Driver[any], mode idemhttp.Mode) {
	mw, err := idemhttp.New(d, idemhttp.Config{Mode: mode,
		Tenant: func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant-ID"), nil }})
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Fail") != "" {
			http.Error(w, "failing on request", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"order":%d}`, n.Add(1))
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	rep, err := conform.Run(context.Background(), conform.Config{URL: srv.URL, TenantHeader: "X-Tenant-ID",
		Tenants: []string{"acme", "globex"}, FailHeader: http.Header{"X-Fail": {"1"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Checks {
		if c.Result != conform.Pass {
			t.Errorf("%s: %s (%s)", c.Name, c.Result, c.Saw)
		}
	}
	if rep.Passed != len(conform.Checks) || !rep.OK() {
		t.Fatalf("%d passed, want %d", rep.Passed, len(conform.Checks))
	}
}
