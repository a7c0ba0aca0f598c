package idemhttp_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrate"
)

// TestNewOnAnUnmigratedDatabase: New finds the missing schema at start and
// says what to run, instead of a middleware whose every request gets 503.
func TestNewOnAnUnmigratedDatabase(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		_, err := idemhttp.New(e.D, idemhttp.Config{})
		if !errors.Is(err, migrate.ErrNotMigrated) || !strings.Contains(err.Error(), "run `idem migrate up`") {
			t.Fatalf("New on an unmigrated database: %v; want migrate.ErrNotMigrated saying to run idem migrate up", err)
		}
		testdb.MustMigrate(t, e.D)
		if _, err := idemhttp.New(e.D, idemhttp.Config{}); err != nil {
			t.Fatalf("New after migrating: %v", err)
		}
	}, testdb.Unmigrated)
}

// TestStoreFailureIsLoggedByDefault: with no Logger configured, a request
// answered 503 because the store failed is logged at slog.Default, at level
// Error. (It replaces the process's default logger: not parallel.)
func TestStoreFailureIsLoggedByDefault(t *testing.T) {
	var logged bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	d := testdb.SQLite(t)
	mw, err := idemhttp.New(d, idemhttp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	d.Close() // the store fails from now on
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "k-1")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503: %s", rec.Code, rec.Body)
	}
	if out := logged.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "key store failed") {
		t.Fatalf("the default logger got %q; want the store failure at level ERROR", out)
	}
}
