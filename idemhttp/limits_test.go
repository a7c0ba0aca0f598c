package idemhttp_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// opFrom takes the operation from X-Op when the request sets it, so a test
// can send operations of any length.
func opFrom(r *http.Request) string {
	if op := r.Header.Get("X-Op"); op != "" {
		return op
	}
	return idemhttp.DefaultOperation(r)
}

// A tenant of MaxTenantLen bytes, an operation of MaxOperationLen bytes
// and a key of idem.MaxKeyLen bytes are stored whole on every dialect
// (MySQL's columns were narrower: a 503 with Retry-After for ever in strict
// mode), and the retry replays.
func TestScopeAtLimitsRoundTrips(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{}
		h := e.handler(t, idemhttp.Config{Operation: opFrom}, a)
		tenant := strings.Repeat("t", idemhttp.MaxTenantLen-2) + "é" // a 2-byte character last
		op := strings.Repeat("o", idemhttp.MaxOperationLen)
		key := strings.Repeat("k", idem.MaxKeyLen)
		hdr := http.Header{"X-Op": {op}}
		first := do(h, req{tenant: tenant, key: key, body: `{}`, header: hdr})
		wantStatus(t, first, http.StatusCreated)
		wantReplay(t, do(h, req{tenant: tenant, key: key, body: `{}`, header: hdr}), first)
		rec, err := e.lookup(tenant, op, key)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Tenant != tenant || rec.Operation != op || rec.Key != key {
			t.Fatalf("record scope of %d/%d/%d bytes, want %d/%d/%d", len(rec.Tenant), len(rec.Operation), len(rec.Key),
				len(tenant), len(op), len(key))
		}
		if a.execs.Load() != 1 {
			t.Fatalf("handler ran %d times, want 1", a.execs.Load())
		}
	})
}

// Two tenants that share a 300-byte prefix are two scopes: each executes
// once and replays its own response. On MySQL this also holds on a pool
// whose URL asks for a non-strict sql_mode, where a narrower column used
// to truncate both tenants to one.
func TestTenantsSharingLongPrefix(t *testing.T) {
	body := func(t *testing.T, e *env) {
		a := &app{}
		h := e.handler(t, idemhttp.Config{}, a)
		prefix := strings.Repeat("p", 300)
		ta, tb := prefix+"-a", prefix+"-b"
		ra := do(h, req{tenant: ta, key: "k", body: `{}`})
		wantStatus(t, ra, http.StatusCreated)
		rb := do(h, req{tenant: tb, key: "k", body: `{}`})
		wantStatus(t, rb, http.StatusCreated)
		if rb.Header().Get(idemhttp.HeaderReplayed) != "" || rb.Body.String() == ra.Body.String() {
			t.Fatalf("tenant B got %s, tenant A's answer was %s", rb.Body.String(), ra.Body.String())
		}
		wantReplay(t, do(h, req{tenant: ta, key: "k", body: `{}`}), ra)
		wantReplay(t, do(h, req{tenant: tb, key: "k", body: `{}`}), rb)
		if a.execs.Load() != 2 {
			t.Fatalf("handler ran %d times, want 2", a.execs.Load())
		}
		if n := e.count(t, `SELECT count(*) FROM `+e.keys); n != 2 {
			t.Fatalf("%d key records, want 2", n)
		}
	}
	forEachDriver(t, body)
}

// checkLimits sends scopes around the limits tenantMax, opMax and keyMax:
// each one within them is stored, each one beyond is refused with 401
// (tenant) or 400 (operation, key) before the store, and none is a 5xx.
func checkLimits(t *testing.T, e *env, tenantMax, opMax, keyMax int) {
	a := &app{}
	h := e.handler(t, idemhttp.Config{Operation: opFrom}, a)
	n := 0
	key := func() string { n++; return "k" + strconv.Itoa(n) }
	send := func(tenant, op, key string, want int) {
		t.Helper()
		w := do(h, req{tenant: tenant, key: key, body: `{}`, header: http.Header{"X-Op": {op}}})
		if w.Code >= 500 {
			t.Fatalf("tenant %d, operation %d, key %d bytes: %d %s, a store failure for client input",
				len(tenant), len(op), len(key), w.Code, w.Body.String())
		}
		wantStatus(t, w, want)
	}
	for _, l := range []int{256, 300, tenantMax} {
		send(strings.Repeat("t", l), "op", key(), http.StatusCreated)
	}
	send(strings.Repeat("t", tenantMax+1), "op", key(), http.StatusUnauthorized)
	for _, l := range []int{513, opMax} {
		send("acme", strings.Repeat("o", l), key(), http.StatusCreated)
	}
	send("acme", strings.Repeat("o", opMax+1), key(), http.StatusBadRequest)
	send("acme", "op", strings.Repeat("k", keyMax), http.StatusCreated)
	send("acme", "op", strings.Repeat("k", keyMax+1), http.StatusBadRequest)
	if got := a.execs.Load(); got != 6 {
		t.Fatalf("handler ran %d times, want 6", got)
	}
	if got := e.count(t, `SELECT count(*) FROM `+e.keys); got != 6 {
		t.Fatalf("%d key records, want 6", got)
	}
}

// A scope longer than the columns hold is client input: 401 for a tenant,
// 400 for an operation or a key, never a 5xx. The lengths between MySQL's
// former widths (255, 512) and idemhttp's limits are stored on every
// dialect.
func TestScopeBeyondLimitsIsClientError(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		checkLimits(t, e, idemhttp.MaxTenantLen, idemhttp.MaxOperationLen, idem.MaxKeyLen)
	})
}

// declaredLimits is a driver whose dialect declares lower column limits.
type declaredLimits struct {
	store.Driver[any]
	set *sqlset.Set
}

func (l declaredLimits) Statements() *sqlset.Set { return l.set }

// The limits a dialect declares (sqlset.Limits) are enforced by the
// middleware when they are below its own: a longer value is refused before
// the store.
func TestDeclaredLimitsRefuseBeforeStore(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) {
		set := *d.D.Statements()
		set.Limits = sqlset.Limits{HTTPTenant: 301, HTTPOperation: 600, HTTPKey: 100}
		checkLimits(t, newEnv(t, store.Driver[any](declaredLimits{d.D, &set})), 301, 600, 100)
	})
}
