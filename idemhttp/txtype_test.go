package idemhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
)

// TestTxOfAnotherTypeSaysTheDriversType: asking for the request's
// transaction with the wrong type parameter (pgx.Tx on a database/sql
// store) is a wiring mistake; Tx says which type the driver uses instead of
// answering nil, false as if there were no transaction.
func TestTxOfAnotherTypeSaysTheDriversType(t *testing.T) {
	t.Parallel()
	testdb.SkipWithoutSQLite(t)
	d, done := openExampleDB()
	defer done()
	mw, err := idemhttp.New(d, idemhttp.Config{Tenant: tenantFromAuth})
	if err != nil {
		t.Fatal(err)
	}
	var said string
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			said = fmt.Sprint(recover())
			w.WriteHeader(http.StatusCreated)
		}()
		_, _ = idemhttp.Tx[pgx.Tx](r.Context())
	}))
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "k-1")
	req.SetBasicAuth("acme", "")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	for _, want := range []string{"idemhttp.Tx[pgx.Tx]", "transaction type is *sql.Tx", "call idemhttp.Tx[*sql.Tx]"} {
		if !strings.Contains(said, want) {
			t.Errorf("Tx said %q, want it to contain %q", said, want)
		}
	}
	// Outside the middleware there is no transaction, and no mistake to name.
	if tx, ok := idemhttp.Tx[pgx.Tx](req.Context()); ok || tx != nil {
		t.Fatalf("Tx outside the middleware = %v, %v; want nil, false", tx, ok)
	}
}
