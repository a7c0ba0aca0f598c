package boxoffice_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// TestOpenPicksTheDriver: Open (what idem demo, worker and drill use) runs
// the System on pgx for a postgres:// URL — the driver that declares
// pipelining and LISTEN/NOTIFY, which database/sql declares neither of —
// and on database/sql for the SQLite default; an order placed through the
// API is stored and read back on both.
func TestOpenPicksTheDriver(t *testing.T) {
	ctx := context.Background()
	api := boxoffice.Config{Roles: []boxoffice.Role{boxoffice.RoleAPI}, WebhookSecrets: []string{testSecret}}
	for _, c := range []struct {
		name     string
		opts     func(t *testing.T) boxoffice.Options
		dialect  store.Dialect
		pipeline bool
	}{
		{"sqlite", func(t *testing.T) boxoffice.Options {
			return boxoffice.Options{DataDir: t.TempDir(), Config: api}
		}, store.SQLite, false},
		{"postgres", func(t *testing.T) boxoffice.Options {
			conn, schema := testdb.PostgresSchema(t)
			return boxoffice.Options{DataDir: t.TempDir(), DatabaseURL: conn, Schema: schema, Config: api}
		}, store.Postgres, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			sys, err := boxoffice.Open(ctx, c.opts(t))
			if err != nil {
				t.Fatal(err)
			}
			defer sys.Close()
			d := sys.DB()
			if d.Dialect() != c.dialect || d.SupportsPipeline() != c.pipeline || d.SupportsListener() != c.pipeline {
				t.Fatalf("driver: dialect %s pipeline %v listener %v, want %s and %v (pgx on PostgreSQL)", d.Dialect(), d.SupportsPipeline(), d.SupportsListener(), c.dialect, c.pipeline)
			}
			srv := httptest.NewServer(sys.Handler())
			defer srv.Close()
			id := placeOrder(t, srv.URL, "open-1")
			if a := call(t, http.MethodGet, srv.URL+"/orders/"+id, map[string]string{"X-Tenant-ID": "acme"}, nil); a.status != http.StatusOK {
				t.Fatalf("GET the order: %d %s", a.status, a.body)
			}
			if a := call(t, http.MethodPost, srv.URL+"/orders", map[string]string{"Idempotency-Key": "open-1", "Content-Type": "application/json", "X-Tenant-ID": "acme"}, []byte(orderBody)); a.status != http.StatusCreated {
				t.Fatalf("replay: %d %s", a.status, a.body)
			}
			st, err := sys.Stats(ctx)
			if err != nil || st.Orders != 1 {
				t.Fatalf("stats %+v, %v: want one order after the replay", st, err)
			}
		})
	}
}
