package conform_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/cmd/idem/conform"
)

func results(r conform.Report) map[string]conform.Result {
	m := map[string]conform.Result{}
	for _, c := range r.Checks {
		m[c.Name] = c.Result
	}
	return m
}

// A server that ignores Idempotency-Key fails every check that needs it,
// and the checks it cannot run are SKIP, never PASS.
func TestConformFailsANonIdempotentServer(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"order":%d}`, n.Add(1))
	}))
	defer srv.Close()
	rep, err := conform.Run(context.Background(), conform.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	got := results(rep)
	want := map[string]conform.Result{
		"first_call": conform.Pass, "replay_identical": conform.Fail, "replay_marker": conform.Fail,
		"reordered_json": conform.Fail, "concurrent_retries": conform.Fail, "changed_payload_422": conform.Fail,
		"missing_key_400": conform.Fail, "malformed_keys_400": conform.Fail,
		"other_tenant_independent": conform.Skip, "5xx_not_stored": conform.Skip,
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %s, want %s", name, got[name], w)
		}
	}
	if len(rep.Checks) != len(conform.Checks) || rep.OK() || rep.Failed != 7 || rep.Skipped != 2 {
		t.Fatalf("report %+v", rep)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil || !strings.Contains(b.String(), "replay_identical          FAIL") {
		t.Fatalf("table:\n%s", b.String())
	}
}

// A first call the target refuses makes the dependent checks SKIP and the
// first call FAIL.
func TestConformFirstCallRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusBadRequest)
	}))
	defer srv.Close()
	rep, err := conform.Run(context.Background(), conform.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	got := results(rep)
	if got["first_call"] != conform.Fail || got["replay_identical"] != conform.Skip || got["changed_payload_422"] != conform.Skip {
		t.Fatalf("results %v", got)
	}
}

func TestConformRejectsBadURL(t *testing.T) {
	if _, err := conform.Run(context.Background(), conform.Config{URL: "ftp://x"}); err == nil {
		t.Fatal("ftp URL accepted")
	}
}
