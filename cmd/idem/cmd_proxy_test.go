package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/idemproxy"
	upstreamnode "github.com/idemkit/idem/examples/upstream-node"
	"github.com/idemkit/idem/idemhttp"
)

func nodeUpstream(t *testing.T, port int) *upstreamnode.Upstream {
	return upstreamnode.StartTest(t, port)
}

// startProxyCmd runs "idem proxy" in-process and returns its URL, its
// standard error so far (a func) and a stop function.
func startProxyCmd(t *testing.T, args ...string) (base string, stderr func() string, stop func() error) {
	t.Helper()
	base, _, stderr, stop = startProxyCmdLines(t, args...)
	return base, stderr, stop
}

// startProxyCmdLines is startProxyCmd that also returns the start-up text
// the proxy printed on standard output, up to "Press Ctrl-C to stop.".
func startProxyCmdLines(t *testing.T, args ...string) (base string, lines []string, stderr func() string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var mu sync.Mutex
	var errb strings.Builder
	done := make(chan error, 1)
	env := &Env{Stdout: pw, Stderr: lockedWriter{&mu, &errb}, Getenv: func(string) string { return "" }}
	go func() {
		err := runProxy(ctx, env, append([]string{"--addr", "127.0.0.1:0"}, args...))
		pw.CloseWithError(io.EOF)
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() {
		cancel()
		t.Fatalf("proxy printed nothing: %v; stderr %s", <-done, errb.String())
	}
	line := sc.Text()
	lines = append(lines, line)
	for !strings.HasPrefix(lines[len(lines)-1], "Press Ctrl-C") && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	i := strings.Index(line, "http://")
	if i < 0 {
		cancel()
		t.Fatalf("no URL in %q", line)
	}
	base, _, _ = strings.Cut(line[i:], " ")
	stop = sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { _ = stop() })
	return base, lines, func() string { mu.Lock(); defer mu.Unlock(); return errb.String() }, stop
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func freePort(t *testing.T) int { return upstreamnode.FreePort(t) }

// idem proxy with --expired-lease hold: the upstream is SIGKILLed while it
// holds a request; after the lease the key is held for reconciliation and
// "idem keys show" shows it (state failed), and the retry answers 409.
func TestProxyCommandHoldVisibleInKeysShow(t *testing.T) {
	port := freePort(t)
	up := nodeUpstream(t, port)
	db := "sqlite://" + filepath.Join(t.TempDir(), "idem.db")
	base, _, _ := startProxyCmd(t, "--upstream", up.URL, "--db", db, "--route", "POST /orders=orders.create",
		"--tenant-header", "X-Tenant-ID", "--lease", "2s", "--expired-lease", "hold")
	hdr := map[string]string{"Idempotency-Key": `"crash-1"`, "X-Tenant-ID": "acme", "Content-Type": "application/json"}
	slow := map[string]string{"X-Upstream-Delay-Ms": "60000"}
	for k, v := range hdr {
		slow[k] = v
	}
	res := make(chan httpReply, 1)
	go func() { res <- call(t, "POST", base+"/orders", slow, `{"sku":"a"}`) }()
	up.WaitExecutions(t, 1)
	up.Kill()
	if r := <-res; r.status != 502 {
		t.Fatalf("status %d after the upstream crashed, want 502: %s", r.status, r.body)
	}
	up2 := nodeUpstream(t, port)
	// Poll until the lease (2s) has passed: 409 in flight until then.
	var r httpReply
	for deadline := time.Now().Add(60 * time.Second); ; {
		r = call(t, "POST", base+"/orders", hdr, `{"sku":"a"}`)
		if typ := problemType(t, r); strings.HasSuffix(typ, "#TypeNeedsReconciliation") {
			break
		} else if !strings.HasSuffix(typ, "#TypeInFlight") || time.Now().After(deadline) {
			t.Fatalf("retry: %d %s, want in flight and then needs reconciliation", r.status, r.body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	code, out, errOut := runCmd(t, nil, "keys", "show", "--db", db, "--tenant", "acme", "--operation", "orders.create", "crash-1")
	if code != 0 || !strings.Contains(out, "failed") {
		t.Fatalf("idem keys show: exit %d, stdout %q, stderr %q; want the held (failed) record", code, out, errOut)
	}
	if c, err := up2.Count(context.Background()); err != nil || c.Executions != 0 {
		t.Fatalf("restarted upstream: %+v, %v; want no execution of the held key", c, err)
	}
}

// The start-up text names the routes and warns about default operation
// names and a shared tenant; a duplicate retry is replayed.
func TestProxyCommandWarnsAndReplays(t *testing.T) {
	up := nodeUpstream(t, 0)
	db := "sqlite://" + filepath.Join(t.TempDir(), "idem.db")
	// Port 0: the proxy prints the address it bound, so no other test can
	// take a port picked in advance.
	base, lines, stderr, stop := startProxyCmdLines(t, "--upstream", up.URL, "--db", db, "--route", "POST /orders", "--metrics-addr", "127.0.0.1:0")
	var metricsURL string
	for _, l := range lines {
		if u, ok := strings.CutPrefix(strings.TrimSpace(l), "metrics:"); ok {
			metricsURL = strings.TrimSpace(u)
		}
	}
	if !strings.HasPrefix(metricsURL, "http://127.0.0.1:") || strings.HasPrefix(metricsURL, "http://127.0.0.1:0/") {
		t.Fatalf("no bound metrics address in the start-up text %q", lines)
	}
	hdr := map[string]string{"Idempotency-Key": `"w-1"`, "Content-Type": "application/json"}
	first := call(t, "POST", base+"/orders", hdr, `{"a":1}`)
	again := call(t, "POST", base+"/orders", hdr, `{"a":1}`)
	if first.status != 201 || again.status != 201 || again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(first.body) {
		t.Fatalf("first %d %s, retry %d %s (replayed %q)", first.status, first.body, again.status, again.body, again.header.Get("Idempotent-Replayed"))
	}
	m := call(t, "GET", metricsURL, nil, "")
	for _, want := range []string{
		`idem_proxy_requests_total{operation="POST /orders",outcome="replayed"} 1`,
		`idem_duplicates_suppressed_total{component="proxy",consumer="POST /orders"} 1`,
		`idem_table_rows{table="idempotency_keys"} 1`,
	} {
		if !strings.Contains(string(m.body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	e := stderr()
	if !strings.Contains(e, `route "POST /orders" has no operation name`) || !strings.Contains(e, "no tenant source") {
		t.Fatalf("stderr %q, want warnings about the default operation and the shared tenant", e)
	}
}

func TestProxyCommandBadLines(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(cfg, []byte("routes:\n  - route: POST /orders\n    expired_leas: hold\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"proxy"},
		{"proxy", "--upstream", "ftp://x"},
		{"proxy", "--upstream", "http://127.0.0.1:1", "--route", "orders"},
		{"proxy", "--upstream", "http://127.0.0.1:1", "--expired-lease", "later"},
		{"proxy", "--upstream", "http://127.0.0.1:1", "--config", cfg},
		{"proxy", "--upstream", "http://127.0.0.1:1", "--db", "mysql://x"},
		{"proxy", "--upstream", "http://127.0.0.1:1", "extra"},
	} {
		code, _, errOut := runCmd(t, nil, args...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %q)", args, code, errOut)
		}
		assertOneLine(t, strconv.Quote(strings.Join(args, " ")), errOut)
	}
}

// On shutdown idem proxy lets an in-flight request finish: its answer
// reaches the client and is recorded.
func TestProxyCommandShutdownFinishesInFlight(t *testing.T) {
	up := nodeUpstream(t, 0)
	db := "sqlite://" + filepath.Join(t.TempDir(), "idem.db")
	base, _, stop := startProxyCmd(t, "--upstream", up.URL, "--db", db, "--route", "POST /orders=orders.create", "--shutdown-timeout", "30s")
	hdr := map[string]string{"Idempotency-Key": `"late"`, "Content-Type": "application/json", "X-Upstream-Delay-Ms": "500"}
	res := make(chan httpReply, 1)
	go func() { res <- call(t, "POST", base+"/orders", hdr, `{}`) }()
	up.WaitExecutions(t, 1)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if r := <-res; r.status != 201 {
		t.Fatalf("in-flight request during shutdown: %d %s, want 201", r.status, r.body)
	}
	code, out, errOut := runCmd(t, nil, "keys", "show", "--db", db, "--operation", "orders.create", "late")
	if code != 0 || !strings.Contains(out, "completed") {
		t.Fatalf("idem keys show: exit %d, %q %q; want the completed record", code, out, errOut)
	}
}

// Two idem proxy processes on one PostgreSQL database: a key executed
// through one is replayed through the other, and idem conform passes
// against both.
func TestProxyCommandTwoInstancesPostgres(t *testing.T) {
	db := pgDatabase(t)
	up := nodeUpstream(t, 0)
	args := []string{"--upstream", up.URL, "--db", db, "--route", "POST /orders=orders.create", "--tenant-header", "X-Tenant-ID"}
	a, _, _ := startProxyCmd(t, args...)
	b, _, _ := startProxyCmd(t, args...)
	hdr := map[string]string{"Idempotency-Key": `"pg-1"`, "X-Tenant-ID": "acme", "Content-Type": "application/json"}
	first := call(t, "POST", a+"/orders", hdr, `{"sku":"a"}`)
	again := call(t, "POST", b+"/orders", hdr, `{"sku":"a"}`)
	if first.status != 201 || again.status != 201 || again.header.Get("Idempotent-Replayed") != "true" || string(first.body) != string(again.body) {
		t.Fatalf("through A %d %s; through B %d %s (replayed %q)", first.status, first.body, again.status, again.body, again.header.Get("Idempotent-Replayed"))
	}
	for _, base := range []string{a, b} {
		code, out, errOut := runCmd(t, nil, "conform", base, "--tenant-header", "X-Tenant-ID", "--tenants", "acme,globex",
			"--fail-header", "X-Upstream-Fail:500")
		if code != 0 || !strings.Contains(out, "10 passed, 0 failed, 0 skipped") {
			t.Fatalf("conform against %s: exit %d\n%s%s", base, code, out, errOut)
		}
	}
}

// The start-up text's route line names the expired-lease policy in the
// words of --expired-lease: re-execute (the default, idem.Retake) and hold.
func TestDescribeRoutePolicyWords(t *testing.T) {
	for _, tc := range []struct {
		policy idem.ExpiredLease
		want   string
	}{
		{idem.Retake, "expired lease: re-execute"},
		{idem.Hold, "expired lease: hold"},
	} {
		r := idemproxy.Route{Method: "POST", Path: "/orders", Operation: "orders.create", Tenant: idemproxy.TenantSource{Header: "X-Tenant-ID"}, ExpiredPolicy: tc.policy}
		got := describeRoute(r)
		want := "POST /orders: operation orders.create, key required, tenant header X-Tenant-ID, lease " + "30s" + ", " + tc.want
		if got != want {
			t.Errorf("describeRoute(%v) = %q, want %q", tc.policy, got, want)
		}
	}
}

// --route 'POST /orders=create-order' also guards the spellings of /orders
// an upstream may read as it; "exact" after the path turns that off for
// one route, and the start-up text says so.
func TestProxyCommandRoutePathVariants(t *testing.T) {
	var mu sync.Mutex
	var got []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.EscapedPath())
		mu.Unlock()
		w.WriteHeader(201)
	}))
	defer up.Close()
	db := "sqlite://" + filepath.Join(t.TempDir(), "idem.db")
	base, _, stop := startProxyCmd(t, "--upstream", up.URL, "--db", db, "--tenant-header", "X-Tenant-ID",
		"--route", "POST /orders=create-order", "--route", "POST /refunds exact=refund")
	hdr := map[string]string{"X-Tenant-ID": "acme", "Content-Type": "application/json"}
	for _, path := range []string{"/Orders", "/orders/", "/orders;x=1", "/orders%2F"} {
		r := call(t, "POST", base+path, hdr, `{}`)
		if r.status != 400 || problemType(t, r) != idemhttp.TypeKeyMissing {
			t.Errorf("keyless POST %s: %d %s, want 400 %s", path, r.status, r.body, idemhttp.TypeKeyMissing)
		}
	}
	if r := call(t, "POST", base+"/Refunds", hdr, `{}`); r.status != 201 {
		t.Errorf("keyless POST /Refunds on an exact route: %d %s, want the upstream's 201", r.status, r.body)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "POST /Refunds" {
		t.Fatalf("upstream saw %q, want only POST /Refunds", got)
	}
	want := "POST /refunds: operation refund, key required, tenant header X-Tenant-ID, lease " + "30s" + ", expired lease: re-execute, exact path"
	if d := describeRoute(idemproxy.Route{Method: "POST", Path: "/refunds", Operation: "refund", ExactPath: true,
		Tenant: idemproxy.TenantSource{Header: "X-Tenant-ID"}}); d != want {
		t.Fatalf("describeRoute = %q, want %q", d, want)
	}
}
