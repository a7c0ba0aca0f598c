package idemproxy_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/idemproxy"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
)

// seen is one request as the upstream received it.
type seen struct {
	method, path string
	header       http.Header
}

// recorder is an upstream that records every request it receives and
// answers 201.
type recorder struct {
	URL  string
	mu   sync.Mutex
	reqs []seen
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, seen{r.Method, r.URL.EscapedPath(), r.Header.Clone()})
		rec.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(srv.Close)
	rec.URL = srv.URL
	return rec
}

func (rec *recorder) requests() []seen {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]seen(nil), rec.reqs...)
}

// do sends one request with any method and raw path (the path is written
// on the wire as given) and returns the answer.
func do(t *testing.T, base, method, rawPath string, header map[string]string, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, base+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = rawPath // sent byte for byte, no cleaning or re-escaping
	for k, v := range header {
		req.Header.Set(k, v)
	}
	noRedirect := &http.Client{Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func wantProblem(t *testing.T, what string, a answer, status int, typ string) {
	t.Helper()
	if a.status != status || a.header.Get("Content-Type") != "application/problem+json" || !strings.Contains(a.body, typ) {
		t.Fatalf("%s: %d %s %q, want %d problem+json %s", what, a.status, a.header.Get("Content-Type"), a.body, status, typ)
	}
}

// On a route whose tenant is a JWT claim, every request the route matches
// is verified before anything else: a missing or forged token answers 401
// and never reaches the upstream, with or without a key, on a key:
// optional route and for PUT, DELETE and GET alike. A valid token passes.
func TestProxyJWTVerifiesEveryMatchedRequest(t *testing.T) {
	up := newRecorder(t)
	secret := []byte("0123456789abcdef0123456789abcdef-secret")
	jc := &idemproxy.JWTConfig{Claim: "tenant", HS256Secret: secret}
	routes := []idemproxy.Route{
		{Method: "POST", Path: "/orders", Operation: "orders.create", Optional: true, Tenant: idemproxy.TenantSource{JWT: jc}},
		{Path: "/accounts/{id}", Operation: "accounts", Tenant: idemproxy.TenantSource{JWT: jc}},
	}
	d := testdb.SQLite(t)
	p := startProxy(t, d, up.URL, idemproxy.Config{Routes: routes})
	exp := time.Now().Add(time.Hour).Unix()
	good := "Bearer " + sign(t, jwt.SigningMethodHS256, secret, "", jwt.MapClaims{"tenant": "acme", "exp": exp})
	forged := "Bearer " + sign(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-0123456789"), "", jwt.MapClaims{"tenant": "acme", "exp": exp})
	none := "Bearer " + sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", jwt.MapClaims{"tenant": "acme", "exp": exp})

	for _, c := range []struct{ method, path string }{
		{"POST", "/orders"}, {"PUT", "/accounts/1"}, {"DELETE", "/accounts/1"}, {"GET", "/accounts/1"}, {"PATCH", "/accounts/1"},
	} {
		for name, auth := range map[string]string{"no token": "", "forged": forged, "alg none": none, "not bearer": "Basic YTpi"} {
			h := map[string]string{"Content-Type": "application/json"}
			if auth != "" {
				h["Authorization"] = auth
			}
			a := do(t, p.URL, c.method, c.path, h, `{}`)
			wantProblem(t, c.method+" "+c.path+" keyless, "+name, a, 401, idemhttp.TypeUnauthorized)
			if a.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s, %s: 401 without WWW-Authenticate", c.method, c.path, name)
			}
		}
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("%d requests without a valid token reached the upstream: %+v", n, up.requests())
	}
	// A valid token passes, keyless on the optional route and for every
	// method on the other one; a keyed request still goes through the
	// contract with the token's tenant.
	auth := map[string]string{"Authorization": good, "Content-Type": "application/json"}
	wantStatus(t, do(t, p.URL, "POST", "/orders", auth, `{}`), 201)
	for _, m := range []string{"PUT", "DELETE", "GET"} {
		wantStatus(t, do(t, p.URL, m, "/accounts/1", auth, `{}`), 201)
	}
	keyed := map[string]string{"Authorization": good, "Content-Type": "application/json", "Idempotency-Key": `"k"`}
	wantStatus(t, do(t, p.URL, "POST", "/orders", keyed, `{}`), 201)
	replay := do(t, p.URL, "POST", "/orders", keyed, `{}`)
	if replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("a keyed retry with a valid token was not replayed")
	}
	if _, err := idemhttp.Lookup(t.Context(), d, "acme", "orders.create", "k"); err != nil {
		t.Fatalf("record of the keyed request under the token's tenant: %v", err)
	}
	if n := len(up.requests()); n != 5 {
		t.Fatalf("%d requests reached the upstream, want 5", n)
	}
}

// Spellings of a configured route's path that an upstream may read as the
// route (another case, a trailing slash, matrix parameters, an encoded
// slash) get the route's contract by default: a keyless POST answers 400
// and never reaches the upstream, a keyed one executes once under the
// route's operation. Route.ExactPath turns the variants off for one route.
func TestProxyRoutePathVariants(t *testing.T) {
	variants := []string{"/Orders", "/orders/", "/orders;x=1", "/orders%2F", "/ORDERS;a=b/", "/orders/;x", "/%6Frders%2f"}
	tenant := idemproxy.TenantSource{Header: "X-Tenant-ID"}
	hdr := func(key string) map[string]string {
		h := map[string]string{"X-Tenant-ID": "acme", "Content-Type": "application/json"}
		if key != "" {
			h["Idempotency-Key"] = `"` + key + `"`
		}
		return h
	}
	t.Run("normalised", func(t *testing.T) {
		up := newRecorder(t)
		d := testdb.SQLite(t)
		p := startProxy(t, d, up.URL, idemproxy.Config{Routes: []idemproxy.Route{
			{Method: "POST", Path: "/orders", Operation: "create-order", Tenant: tenant},
			{Method: "POST", Path: "/accounts/{id}/charge", Operation: "charge", Tenant: tenant},
			// A catch-all with an optional key must not take the variants
			// of the stricter route.
			{Path: "/", Operation: "other", Optional: true, Tenant: tenant},
		}})
		for _, v := range append(variants, "/Accounts/7/Charge", "/accounts/7/charge/", "/accounts/7;v=1/charge") {
			wantProblem(t, "keyless POST "+v, do(t, p.URL, "POST", v, hdr(""), `{}`), 400, idemhttp.TypeKeyMissing)
		}
		if n := len(up.requests()); n != 0 {
			t.Fatalf("%d keyless variants reached the upstream: %+v", n, up.requests())
		}
		for i, v := range variants {
			key := "k" + itoa(i)
			wantStatus(t, do(t, p.URL, "POST", v, hdr(key), `{}`), 201)
			again := do(t, p.URL, "POST", v, hdr(key), `{}`)
			if again.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("POST %s: the keyed retry was not replayed", v)
			}
			if _, err := idemhttp.Lookup(t.Context(), d, "acme", "create-order", key); err != nil {
				t.Fatalf("POST %s: no record under the route's operation: %v", v, err)
			}
		}
		// Paths that are not spellings of a route keep their own rules.
		for _, other := range []string{"/orders/1", "/ordersx", "/Orders/1"} {
			wantStatus(t, do(t, p.URL, "POST", other, hdr(""), `{}`), 201)
		}
		wantStatus(t, do(t, p.URL, "GET", "/Orders", hdr(""), ""), 201)
		if n := len(up.requests()); n != len(variants)+4 {
			t.Fatalf("%d requests reached the upstream, want %d (one per keyed variant and the 4 others)", n, len(variants)+4)
		}
	})
	t.Run("exact", func(t *testing.T) {
		up := newRecorder(t)
		p := startProxy(t, testdb.SQLite(t), up.URL, idemproxy.Config{Routes: []idemproxy.Route{
			{Method: "POST", Path: "/orders", Operation: "create-order", Tenant: tenant, ExactPath: true},
		}})
		wantProblem(t, "keyless POST /orders", do(t, p.URL, "POST", "/orders", hdr(""), `{}`), 400, idemhttp.TypeKeyMissing)
		for _, v := range []string{"/Orders", "/orders;x=1", "/orders%2F"} {
			wantStatus(t, do(t, p.URL, "POST", v, hdr(""), `{}`), 201)
		}
		if n := len(up.requests()); n != 3 {
			t.Fatalf("%d requests reached the upstream, want the 3 variants", n)
		}
	})
}

// A client cannot make the proxy strip the headers it scoped the request
// by: whatever Connection names, the upstream receives the tenant header,
// the JWT header, the Idempotency-Key and the fingerprint headers (the
// body's Content-Type among them) as the proxy read them. Other headers
// Connection names are still removed.
func TestProxyConnectionCannotStripScopeHeaders(t *testing.T) {
	up := newRecorder(t)
	secret := []byte("0123456789abcdef0123456789abcdef-secret")
	p := startProxy(t, testdb.SQLite(t), up.URL, idemproxy.Config{Routes: []idemproxy.Route{
		{Method: "POST", Path: "/orders", Operation: "orders.create", Tenant: idemproxy.TenantSource{Header: "X-Tenant-ID"},
			FingerprintHeaders: []string{"X-Api-Version"}},
		{Method: "POST", Path: "/refunds", Operation: "refunds", Optional: true,
			Tenant: idemproxy.TenantSource{JWT: &idemproxy.JWTConfig{Claim: "tenant", HS256Secret: secret}}},
	}})
	wantStatus(t, do(t, p.URL, "POST", "/orders", map[string]string{
		"Connection": "X-Tenant-ID, Idempotency-Key, X-Api-Version, Content-Type, X-Drop-Me", "X-Tenant-ID": "acme",
		"Idempotency-Key": `"k1"`, "X-Api-Version": "2", "X-Drop-Me": "1", "Content-Type": "application/json"}, `{}`), 201)
	tok := "Bearer " + sign(t, jwt.SigningMethodHS256, secret, "", jwt.MapClaims{"tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()})
	for _, key := range []string{`"k2"`, ""} {
		h := map[string]string{"Connection": "Authorization, Idempotency-Key", "Authorization": tok, "Content-Type": "application/json"}
		if key != "" {
			h["Idempotency-Key"] = key
		}
		wantStatus(t, do(t, p.URL, "POST", "/refunds", h, `{}`), 201)
	}
	got := up.requests()
	if len(got) != 3 {
		t.Fatalf("%d upstream requests, want 3", len(got))
	}
	for name, want := range map[string]string{"X-Tenant-ID": "acme", "Idempotency-Key": `"k1"`, "X-Api-Version": "2", "Content-Type": "application/json"} {
		if v := got[0].header.Values(name); len(v) != 1 || v[0] != want {
			t.Errorf("upstream saw %s %q, want %q", name, v, want)
		}
	}
	if v := got[0].header.Get("X-Drop-Me"); v != "" {
		t.Errorf("X-Drop-Me, named in Connection, reached the upstream: %q", v)
	}
	for i, want := range []string{`"k2"`, ""} {
		if a := got[1+i].header.Get("Authorization"); a != tok {
			t.Errorf("request %d: upstream saw Authorization %q, want the verified token", 1+i, a)
		}
		if k := got[1+i].header.Get("Idempotency-Key"); k != want {
			t.Errorf("request %d: upstream saw Idempotency-Key %q, want %q", 1+i, k, want)
		}
	}
}

// Routes that cannot keep their promises are refused at start: a
// hop-by-hop header as tenant or fingerprint header (it never reaches the
// upstream), and two routes whose path variants overlap (one of them must
// be exact).
func TestProxyRefusesRoutesItCannotServe(t *testing.T) {
	d := testdb.SQLite(t)
	up, _ := url.Parse("http://127.0.0.1:1")
	for name, routes := range map[string][]idemproxy.Route{
		"hop-by-hop tenant":      {{Method: "POST", Path: "/orders", Operation: "o", Tenant: idemproxy.TenantSource{Header: "Connection"}}},
		"hop-by-hop fingerprint": {{Method: "POST", Path: "/orders", Operation: "o", FingerprintHeaders: []string{"te"}}},
		"overlapping variants":   {{Method: "POST", Path: "/Orders", Operation: "a"}, {Method: "POST", Path: "/orders", Operation: "b"}},
	} {
		if _, err := idemproxy.New(d, idemproxy.Config{Upstream: up, Routes: routes}); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	ok := []idemproxy.Route{{Method: "POST", Path: "/Orders", Operation: "a", ExactPath: true}, {Method: "POST", Path: "/orders", Operation: "b"},
		{Method: "POST", Path: "/orders/", Operation: "c"}}
	if _, err := idemproxy.New(d, idemproxy.Config{Upstream: up, Routes: ok}); err != nil {
		t.Fatalf("an exact route beside its variant: %v", err)
	}
}
