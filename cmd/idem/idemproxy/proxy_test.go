package idemproxy_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/idemproxy"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
)

func ordersRoute(policy idem.ExpiredLease) idemproxy.Route {
	return idemproxy.Route{Method: "POST", Path: "/orders", Operation: "orders.create",
		Tenant: idemproxy.TenantSource{Header: "X-Tenant-ID"}, ExpiredPolicy: policy}
}

// The contract in front of the Node.js service: execute once, replay byte
// for byte with the marker, 422 on a changed payload, 400 without a key,
// the key forwarded upstream, tenants independent.
func TestProxyContract(t *testing.T) {
	up := nodeUpstream(t, 0)
	d := testdb.SQLite(t)
	p := startProxy(t, d, up.URL, idemproxy.Config{Routes: []idemproxy.Route{ordersRoute(idem.Retake)}})

	first := send(t, p.URL, call{key: "k1", tenant: "acme", body: `{"sku":"a","qty":1}`})
	wantStatus(t, first, 201)
	if first.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("first answer marked as replayed")
	}
	again := send(t, p.URL, call{key: "k1", tenant: "acme", body: `{"qty":1,"sku":"a"}`})
	wantStatus(t, again, 201)
	if again.body != first.body || again.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("replay %q (Location %q), want %q (%q)", again.body, again.header.Get("Location"), first.body, first.header.Get("Location"))
	}
	if again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("replay without Idempotent-Replayed: true")
	}
	wantStatus(t, send(t, p.URL, call{key: "k1", tenant: "acme", body: `{"sku":"a","qty":2}`}), 422)
	wantStatus(t, send(t, p.URL, call{tenant: "acme", body: `{"sku":"a"}`}), 400)
	other := send(t, p.URL, call{key: "k1", tenant: "globex", body: `{"sku":"a","qty":1}`})
	wantStatus(t, other, 201)
	if other.body == first.body {
		t.Fatal("another tenant's request with the same key got the first tenant's answer")
	}
	c := executions(t, up)
	if c.Executions != 2 || c.ByKey[`"k1"`] != 2 {
		t.Fatalf("upstream counts %+v, want 2 executions, both with the forwarded key \"k1\"", c)
	}
	// Unconfigured routes pass through untouched.
	resp, err := http.Get(p.URL + "/count")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /count through the proxy: %d", resp.StatusCode)
	}
	if w := p.Proxy.Warnings(); len(w) != 0 {
		t.Fatalf("warnings %q for a fully configured route", w)
	}
}

// An upstream 500 is not stored: the retry executes.
func TestProxyUpstream500NotStored(t *testing.T) {
	up := nodeUpstream(t, 0)
	d := testdb.SQLite(t)
	p := startProxy(t, d, up.URL, idemproxy.Config{Routes: []idemproxy.Route{ordersRoute(idem.Retake)}})
	wantStatus(t, send(t, p.URL, call{key: "k", tenant: "acme", body: `{}`, headers: map[string]string{"X-Upstream-Fail": "500"}}), 500)
	if _, err := idemhttp.Lookup(context.Background(), d, "acme", "orders.create", "k"); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("record after an upstream 500: %v, want none", err)
	}
	retry := send(t, p.URL, call{key: "k", tenant: "acme", body: `{}`})
	wantStatus(t, retry, 201)
	if retry.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("the retry after a 500 was a replay")
	}
	if c := executions(t, up); c.Executions != 2 {
		t.Fatalf("%d upstream executions, want 2 (the 500 and the retry)", c.Executions)
	}
}

// A connection error before anything was sent: 502 problem+json, nothing
// recorded, the retry executes once the upstream is back.
func TestProxyConnectionRefused(t *testing.T) {
	port := freePort(t)
	d := testdb.SQLite(t)
	p := startProxy(t, d, "http://127.0.0.1:"+itoa(port), idemproxy.Config{Routes: []idemproxy.Route{ordersRoute(idem.Hold)}})
	a := send(t, p.URL, call{key: "k", tenant: "acme", body: `{}`})
	wantStatus(t, a, 502)
	if a.header.Get("Content-Type") != "application/problem+json" || !strings.Contains(a.body, idemproxy.TypeUpstreamUnavailable) {
		t.Fatalf("answer %s %q, want problem+json %s", a.header.Get("Content-Type"), a.body, idemproxy.TypeUpstreamUnavailable)
	}
	if _, err := idemhttp.Lookup(context.Background(), d, "acme", "orders.create", "k"); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("record after a refused connection: %v, want none", err)
	}
	up := nodeUpstream(t, port)
	wantStatus(t, send(t, p.URL, call{key: "k", tenant: "acme", body: `{}`}), 201)
	if c := executions(t, up); c.Executions != 1 {
		t.Fatalf("%d executions, want 1", c.Executions)
	}
}

// The upstream is SIGKILLed while it holds a request: the answer is 502,
// nothing is recorded, the key stays pending through its lease, and then
// the policy is observed: re-executed once, or held for an operator.
func TestProxyUpstreamKilledMidRequest(t *testing.T) {
	for _, policy := range []idem.ExpiredLease{idem.Retake, idem.Hold} {
		t.Run(policy.String(), func(t *testing.T) {
			port := freePort(t)
			up := nodeUpstream(t, port)
			d := testdb.SQLite(t)
			clk := &clock{now: time.Now()}
			rt := ordersRoute(policy)
			rt.Lease = 30 * time.Second
			p := startProxy(t, d, up.URL, idemproxy.Config{Routes: []idemproxy.Route{rt}, Now: clk.Now})
			res := make(chan answer, 1)
			go func() {
				a, err := sendErr(p.URL, call{key: "k", tenant: "acme", body: `{"sku":"a"}`, headers: map[string]string{"X-Upstream-Delay-Ms": "60000"}})
				if err != nil {
					t.Error(err)
				}
				res <- a
			}()
			up.WaitExecutions(t, 1)
			up.Kill()
			a := <-res
			wantStatus(t, a, 502)
			if !strings.Contains(a.body, idemproxy.TypeUpstreamOutcomeUnknown) {
				t.Fatalf("answer %q, want %s", a.body, idemproxy.TypeUpstreamOutcomeUnknown)
			}
			rec, err := idemhttp.Lookup(context.Background(), d, "acme", "orders.create", "k")
			if err != nil || rec.State != idemhttp.StateInProgress {
				t.Fatalf("record after the crash: %+v, %v; want pending (nothing recorded)", rec, err)
			}
			up2 := nodeUpstream(t, port)
			// Inside the lease: in flight, the upstream is not called.
			wantStatus(t, send(t, p.URL, call{key: "k", tenant: "acme", body: `{"sku":"a"}`}), 409)
			clk.Add(31 * time.Second)
			after := send(t, p.URL, call{key: "k", tenant: "acme", body: `{"sku":"a"}`})
			switch policy {
			case idem.Retake:
				wantStatus(t, after, 201)
				if c := executions(t, up2); c.Executions != 1 || c.ByKey[`"k"`] != 1 {
					t.Fatalf("restarted upstream counts %+v, want the key re-executed once", c)
				}
				replay := send(t, p.URL, call{key: "k", tenant: "acme", body: `{"sku":"a"}`})
				wantStatus(t, replay, 201)
				if replay.header.Get("Idempotent-Replayed") != "true" || replay.body != after.body {
					t.Fatal("the re-executed answer was not replayed")
				}
			case idem.Hold:
				wantStatus(t, after, 409)
				if !strings.Contains(after.body, idemhttp.TypeNeedsReconciliation) {
					t.Fatalf("answer %q, want %s", after.body, idemhttp.TypeNeedsReconciliation)
				}
				held, err := idemhttp.ListHeld(context.Background(), d, 10)
				if err != nil || len(held) != 1 || held[0].Key != "k" || held[0].Operation != "orders.create" {
					t.Fatalf("held keys %v, %v; want the one key", held, err)
				}
				if c := executions(t, up2); c.Executions != 0 {
					t.Fatalf("%d executions on the restarted upstream, want 0 (held)", c.Executions)
				}
			}
		})
	}
}

// A response above the storage cap reaches the client in full and is
// stored as omitted: its replay has the status and Location, no body.
func TestProxyLargeBodyOmitted(t *testing.T) {
	up := nodeUpstream(t, 0)
	d := testdb.SQLite(t)
	p := startProxy(t, d, up.URL, idemproxy.Config{Routes: []idemproxy.Route{ordersRoute(idem.Retake)},
		MaxStoredBody: 4096, MaxResponseMemory: 4096})
	big := map[string]string{"X-Upstream-Size": "300000"}
	first := send(t, p.URL, call{key: "big", tenant: "acme", body: `{}`, headers: big})
	wantStatus(t, first, 201)
	if len(first.body) < 290000 {
		t.Fatalf("first answer has %d bytes, want the full 300000", len(first.body))
	}
	replay := send(t, p.URL, call{key: "big", tenant: "acme", body: `{}`, headers: big})
	wantStatus(t, replay, 201)
	if replay.header.Get("Idempotent-Body-Omitted") != "true" || replay.body != "" || replay.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("replay: omitted=%q body=%d bytes Location=%q; want omitted, empty, %q",
			replay.header.Get("Idempotent-Body-Omitted"), len(replay.body), replay.header.Get("Location"), first.header.Get("Location"))
	}
	if c := executions(t, up); c.Executions != 1 {
		t.Fatalf("%d executions, want 1", c.Executions)
	}
}

// The proxy speaks h2c (HTTP/2 without TLS) as well as HTTP/1.1.
func TestProxyH2C(t *testing.T) {
	up := nodeUpstream(t, 0)
	d := testdb.SQLite(t)
	p := startProxy(t, d, up.URL, idemproxy.Config{Routes: []idemproxy.Route{ordersRoute(idem.Retake)}})
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	for i, want := range []string{"", "true"} {
		req, _ := http.NewRequest(http.MethodPost, p.URL+"/orders", strings.NewReader(`{"sku":"h2"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", `"h2"`)
		req.Header.Set("X-Tenant-ID", "acme")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != 201 || resp.Header.Get("Idempotent-Replayed") != want {
			t.Fatalf("request %d: %s %d replayed=%q, want HTTP/2 201 replayed=%q", i, resp.Proto, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), want)
		}
	}
}

// Without routes the proxy guards every POST with a key and warns that the
// operation names come from the path.
func TestProxyDefaultRouteWarns(t *testing.T) {
	up := nodeUpstream(t, 0)
	d := testdb.SQLite(t)
	p := startProxy(t, d, up.URL, idemproxy.Config{})
	if len(p.Proxy.Warnings()) == 0 {
		t.Fatal("no warning for the default catch-all route")
	}
	wantStatus(t, send(t, p.URL, call{body: `{}`}), 400)
	wantStatus(t, send(t, p.URL, call{key: "k", body: `{}`}), 201)
	if _, err := idemhttp.Lookup(context.Background(), d, "", "POST /orders", "k"); err != nil {
		t.Fatalf("record under the default operation: %v", err)
	}
}

// An upstream that does not answer within the lease: 504 problem+json,
// nothing stored; the lease is over, so under re-execute the retry
// executes again.
func TestProxyUpstreamTimeout(t *testing.T) {
	up := nodeUpstream(t, 0)
	d := testdb.SQLite(t)
	rt := ordersRoute(idem.Retake)
	rt.Lease = 500 * time.Millisecond
	p := startProxy(t, d, up.URL, idemproxy.Config{Routes: []idemproxy.Route{rt}})
	a := send(t, p.URL, call{key: "slow", tenant: "acme", body: `{}`, headers: map[string]string{"X-Upstream-Delay-Ms": "5000"}})
	wantStatus(t, a, 504)
	if !strings.Contains(a.body, idemproxy.TypeUpstreamTimeout) {
		t.Fatalf("body %q, want %s", a.body, idemproxy.TypeUpstreamTimeout)
	}
	if rec, err := idemhttp.Lookup(context.Background(), d, "acme", "orders.create", "slow"); err != nil || rec.State != idemhttp.StateInProgress || rec.Status != 0 {
		t.Fatalf("record after the timeout: %+v, %v; want pending with no response", rec, err)
	}
	retry := send(t, p.URL, call{key: "slow", tenant: "acme", body: `{}`})
	wantStatus(t, retry, 201)
	if retry.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("the retry after a timeout was a replay")
	}
	if c := executions(t, up); c.ByKey[`"slow"`] != 2 {
		t.Fatalf("counts %+v, want the key executed twice (timed out, then re-executed)", c)
	}
}

// The proxy fingerprints as idemhttp does, media type included: the same
// key and bytes as a JSON merge patch and then as a JSON patch are 422,
// and the upstream runs once.
func TestProxyFingerprintCoversMediaType(t *testing.T) {
	up := nodeUpstream(t, 0)
	d := testdb.SQLite(t)
	p := startProxy(t, d, up.URL, idemproxy.Config{Routes: []idemproxy.Route{ordersRoute(idem.Retake)}})
	body := `{"sku":"a","qty":1}`
	merge := map[string]string{"Content-Type": "application/merge-patch+json"}
	wantStatus(t, send(t, p.URL, call{key: "k1", tenant: "acme", body: body, headers: merge}), 201)
	wantStatus(t, send(t, p.URL, call{key: "k1", tenant: "acme", body: body,
		headers: map[string]string{"Content-Type": "application/json-patch+json"}}), 422)
	again := send(t, p.URL, call{key: "k1", tenant: "acme", body: body,
		headers: map[string]string{"Content-Type": "application/merge-patch+json; charset=utf-8"}})
	wantStatus(t, again, 201)
	if again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("the same media type with a charset parameter was not replayed")
	}
	if c := executions(t, up); c.Executions != 1 {
		t.Fatalf("upstream ran %d times, want 1", c.Executions)
	}
}
