package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem/cmd/idem/conform"
)

const conformOrder = `{"event_id":"concert-1","customer_email":"ana@example.com","seats":2,"total_cents":9000,"currency":"EUR"}`

func conformReport(t *testing.T, out string) map[string]string {
	t.Helper()
	var rep struct {
		Checks []struct{ Name, Result, Saw string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	m := map[string]string{}
	for _, c := range rep.Checks {
		m[c.Name] = c.Result
	}
	return m
}

// idem conform passes against idem demo (the 5xx check is SKIP: the demo
// offers no way to provoke one) and exits 0.
func TestConformAgainstDemo(t *testing.T) {
	base, _ := startDemo(t)
	body := filepath.Join(t.TempDir(), "order.json")
	if err := os.WriteFile(body, []byte(conformOrder), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, nil, "conform", base, "--route", "POST /orders", "--body", body,
		"--tenant-header", "X-Tenant-ID", "--tenants", "acme,globex", "--json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q, stdout %s", code, errOut, out)
	}
	res := conformReport(t, out)
	if len(res) != len(conform.Checks) {
		t.Fatalf("%d checks in the report, want %d: %s", len(res), len(conform.Checks), out)
	}
	for name, res := range res {
		want := "PASS"
		if name == "5xx_not_stored" {
			want = "SKIP"
		}
		if res != want {
			t.Errorf("%s: %s, want %s", name, res, want)
		}
	}
}

// idem conform passes every check against idem proxy in front of the
// Node.js upstream; the table names each check.
func TestConformAgainstProxy(t *testing.T) {
	up := nodeUpstream(t, 0)
	db := "sqlite://" + filepath.Join(t.TempDir(), "idem.db")
	base, _, _ := startProxyCmd(t, "--upstream", up.URL, "--db", db, "--route", "POST /orders=orders.create", "--tenant-header", "X-Tenant-ID")
	code, out, errOut := runCmd(t, nil, "conform", base, "--route", "POST /orders", "--tenant-header", "X-Tenant-ID",
		"--tenants", "acme,globex", "--fail-header", "X-Upstream-Fail:500", "--header", "X-Client:conform")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q, stdout %s", code, errOut, out)
	}
	if !strings.Contains(out, "10 passed, 0 failed, 0 skipped") || !strings.Contains(out, "concurrent_retries") {
		t.Fatalf("table:\n%s", out)
	}
}

// A target that breaks the contract exits 1; a bad command line exits 2
// with one line.
func TestConformExitCodes(t *testing.T) {
	up := nodeUpstream(t, 0) // the bare upstream: no idempotency at all
	code, out, _ := runCmd(t, nil, "conform", up.URL, "--json")
	if code != 1 {
		t.Fatalf("exit %d against a server without idempotency, want 1", code)
	}
	if res := conformReport(t, out); res["replay_identical"] != "FAIL" || res["5xx_not_stored"] != "SKIP" {
		t.Fatalf("results %v", res)
	}
	for _, args := range [][]string{
		{"conform"},
		{"conform", "ftp://x"},
		{"conform", "http://a", "http://b"},
		{"conform", "http://a", "--route", "orders"},
		{"conform", "http://a", "--route", "POST /orders exact"},
		{"conform", "http://a", "--header", "nocolon"},
		{"conform", "http://a", "--tenants", "a,b"},
		{"conform", "http://a", "--tenant-header", "X-T"},
		{"conform", "http://a", "--body", "/does/not/exist"},
		{"conform", "http://a", "--concurrency", "1"},
		{"conform", "http://a", "--bogus"},
	} {
		code, _, errOut := runCmd(t, nil, args...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
		assertOneLine(t, strconv.Quote(strings.Join(args, " ")), errOut)
	}
}
