package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/sqlstore"
)

func keysRun(vars map[string]string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	env := &Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return vars[k] }}
	code := run(context.Background(), env, args)
	return code, out.String(), errb.String()
}

func TestKeysShow(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	vars := map[string]string{"IDEM_DATABASE_URL": "sqlite://" + path}
	if code, _, stderr := keysRun(vars, "migrate", "up"); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	d, err := sqlstore.OpenSQLite(path, sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	mw, err := idemhttp.New(d, idemhttp.Config{Tenant: func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil }})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		idemhttp.SetResource(r.Context(), "order", "42")
		w.Header().Set("Location", "/orders/42")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":42}`))
	})))
	r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"seat":"A1"}`))
	r.Header.Set("Idempotency-Key", "k-1")
	r.Header.Set("X-Tenant", "acme")
	mux.ServeHTTP(httptest.NewRecorder(), r)

	code, out, stderr := keysRun(vars, "keys", "show", "--tenant", "acme", "--operation", "POST /orders", "k-1", "--json")
	if code != 0 {
		t.Fatalf("keys show --json: exit %d: %s", code, stderr)
	}
	var got struct {
		ResourceID string `json:"resource_id"`
		Status     int
		Headers    map[string][]string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Status != 201 || got.Headers["Location"][0] != "/orders/42" || !strings.Contains(out, `"state": "completed"`) ||
		!strings.Contains(out, `"body": "{\"id\":42}"`) || got.ResourceID != "42" {
		t.Fatalf("keys show --json: %s", out)
	}
	code, out, stderr = keysRun(vars, "keys", "show", `"k-1"`, "--tenant=acme", "--operation=POST /orders")
	if code != 0 || !strings.Contains(out, "completed") || !strings.Contains(out, "Location: /orders/42") {
		t.Fatalf("keys show: exit %d: %s %s", code, out, stderr)
	}
	if code, _, stderr := keysRun(vars, "keys", "show", "--tenant", "other", "--operation", "POST /orders", "k-1"); code != 1 || !strings.Contains(stderr, "no record") {
		t.Fatalf("another tenant's key: exit %d: %s", code, stderr)
	}
	if code, _, _ := keysRun(vars, "keys", "show", "k-1"); code != 2 {
		t.Fatalf("missing --operation: exit %d, want 2", code)
	}
	if code, _, _ := keysRun(vars, "keys", "list"); code != 2 {
		t.Fatalf("unknown action: exit %d, want 2", code)
	}
}
