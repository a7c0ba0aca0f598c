package boxoffice_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql"
	"github.com/idemkit/idem/store/pgxstore"
	"github.com/idemkit/idem/store/sqlstore"
	"github.com/idemkit/idem/webhook"
)

const testSecret = "whsec_ZHJpbGwtc2VjcmV0LWZvci1pZGVtLWJveG9mZmljZQ=="

const orderBody = `{"event_id":"concert-1","customer_email":"ana@example.com","seats":2,"total_cents":9000,"currency":"EUR"}`

// apiServer serves the API of a System on d.
func apiServer[TTx any](t *testing.T, d store.Driver[TTx]) (*boxoffice.System[TTx], *httptest.Server) {
	t.Helper()
	sys, err := boxoffice.New(context.Background(), d, boxoffice.Config{Roles: []boxoffice.Role{boxoffice.RoleAPI}, WebhookSecrets: []string{testSecret}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Close() })
	srv := httptest.NewServer(sys.Handler())
	t.Cleanup(srv.Close)
	return sys, srv
}

type answer struct {
	status int
	ctype  string
	body   []byte
	detail string
}

func call(t *testing.T, method, url string, hdr map[string]string, body []byte) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), body: b}
	var p struct {
		Detail string `json:"detail"`
	}
	_ = json.Unmarshal(b, &p)
	a.detail = p.Detail
	return a
}

func placeOrder(t *testing.T, base, key string) string {
	t.Helper()
	a := call(t, http.MethodPost, base+"/orders", map[string]string{"Idempotency-Key": key, "Content-Type": "application/json", "X-Tenant-ID": "acme"}, []byte(orderBody))
	if a.status != http.StatusCreated {
		t.Fatalf("POST /orders: %d %s", a.status, a.body)
	}
	var o boxoffice.Order
	if err := json.Unmarshal(a.body, &o); err != nil {
		t.Fatal(err)
	}
	return o.OrderID
}

// dbErrorWords appear in database error texts, which must never reach a
// client.
var dbErrorWords = []string{"SQLSTATE", "invalid byte sequence", "sql:", "pq:", "sqlite", "database is closed", "ERROR"}

func noDBText(t *testing.T, what string, a answer) {
	t.Helper()
	for _, w := range dbErrorWords {
		if strings.Contains(string(a.body), w) {
			t.Errorf("%s: the answer shows database text %q: %s", what, w, a.body)
		}
	}
}

// TestHostileOrderIDs: ids with NUL, invalid UTF-8, other formats answer
// 404 problem+json on every dialect, without a query and without a
// database error text; a valid order still answers 200.
func TestHostileOrderIDs(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		_, srv := apiServer(t, e.D)
		id := placeOrder(t, srv.URL, "k1")
		if a := call(t, http.MethodGet, srv.URL+"/orders/"+id, map[string]string{"X-Tenant-ID": "acme"}, nil); a.status != http.StatusOK {
			t.Fatalf("GET own order: %d %s", a.status, a.body)
		}
		for _, p := range []string{
			"%00", "%ff", "%fe%ff", "ord_%00", id + "%00", id[:len(id)-1] + "%ff", "ord_" + strings.Repeat("a", 5000),
			strings.ToUpper(id), "ord_{" + id[4:] + "}", "urn:uuid:" + id[4:], "%e2%80%ae", "%c0%80", "x%27%20OR%201=1--",
			"ord_01890000-0000-7000-8000-000000000000", // well formed, does not exist
		} {
			a := call(t, http.MethodGet, srv.URL+"/orders/"+p, map[string]string{"X-Tenant-ID": "acme"}, nil)
			if a.status != http.StatusNotFound || a.ctype != "application/problem+json" {
				t.Errorf("GET /orders/%s: %d %s %s", p, a.status, a.ctype, a.body)
			}
			noDBText(t, p, a)
		}
		// Another tenant's order is not found either; a bad tenant is 400.
		if a := call(t, http.MethodGet, srv.URL+"/orders/"+id, map[string]string{"X-Tenant-ID": "other"}, nil); a.status != http.StatusNotFound {
			t.Errorf("other tenant: %d %s", a.status, a.body)
		}
		for _, tn := range []string{"a\x00b", "\xff", strings.Repeat("t", 65), "a b"} {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/orders/"+id, nil)
			req.Header["X-Tenant-Id"] = []string{tn}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				continue // the client refuses to send some of these bytes: fine
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("tenant %q: %d", tn, resp.StatusCode)
			}
		}
	})
}

// TestNoDatabaseErrorInAnswers: when the database fails, every handler
// answers a fixed text; the database's error goes to the log only.
func TestNoDatabaseErrorInAnswers(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		_, srv := apiServer(t, e.D)
		id := placeOrder(t, srv.URL, "k1")
		closeDatabase(t, e)
		for _, c := range []struct {
			method, path string
			body         []byte
			want         int
		}{
			{http.MethodGet, "/orders/" + id, nil, http.StatusInternalServerError},
			{http.MethodGet, "/stats", nil, http.StatusInternalServerError},
			{http.MethodGet, "/healthz", nil, http.StatusServiceUnavailable},
			{http.MethodPost, "/orders", []byte(orderBody), 0},
		} {
			a := call(t, c.method, srv.URL+c.path, map[string]string{"X-Tenant-ID": "acme", "Idempotency-Key": "k2", "Content-Type": "application/json"}, c.body)
			if c.want != 0 && a.status != c.want {
				t.Errorf("%s %s: %d %s", c.method, c.path, a.status, a.body)
			}
			if a.status < 500 {
				t.Errorf("%s %s with the database closed: %d %s", c.method, c.path, a.status, a.body)
			}
			noDBText(t, c.path, a)
		}
	})
}

// closeDatabase closes the connections under e's driver: every query
// fails from then on.
func closeDatabase(t *testing.T, e testdb.Driver) {
	t.Helper()
	switch n := e.Native.(type) {
	case *sqlstore.Driver:
		_ = n.DB().Close()
	case *pgxstore.Driver:
		n.PgxPool().Close()
	case *idemmysql.Driver:
		_ = n.DB().Close()
	default:
		t.Fatalf("closeDatabase: unknown driver %T", e.Native)
	}
}

// TestOrderBodyLimit: any body above MaxOrderBody answers 413
// problem+json, whether the idempotency middleware or the handler sees it
// first; a body at the limit is accepted.
func TestOrderBodyLimit(t *testing.T) {
	_, srv := apiServer(t, testdb.SQLite(t))
	padded := func(n int) []byte { // a valid order of exactly n bytes
		b := []byte(orderBody)
		return append(b[:len(b)-1:len(b)-1], append(bytes.Repeat([]byte(" "), n-len(b)), '}')...)
	}
	for i, n := range []int{boxoffice.MaxOrderBody + 1, 100 << 10, 1<<20 - 1, 1 << 20, 1<<20 + 1, 4 << 20} {
		a := call(t, http.MethodPost, srv.URL+"/orders", map[string]string{"Idempotency-Key": fmt.Sprintf("big-%d", i), "Content-Type": "application/json"}, padded(n))
		if a.status != http.StatusRequestEntityTooLarge || a.ctype != "application/problem+json" {
			t.Errorf("%d bytes: %d %s %.200s", n, a.status, a.ctype, a.body)
		}
	}
	if a := call(t, http.MethodPost, srv.URL+"/orders", map[string]string{"Idempotency-Key": "at-limit", "Content-Type": "application/json"}, padded(boxoffice.MaxOrderBody)); a.status != http.StatusCreated {
		t.Errorf("%d bytes (the limit): %d %.200s", boxoffice.MaxOrderBody, a.status, a.body)
	}
}

// TestPaymentWebhookHostileOrderID: a signed payment for an order id with
// NUL or invalid UTF-8 is refused for good (422), not "retry" (503).
func TestPaymentWebhookHostileOrderID(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		_, srv := apiServer(t, e.D)
		signer, err := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{testSecret}})
		if err != nil {
			t.Fatal(err)
		}
		for i, oid := range []string{"ord_\u0000", "\xff\xfe", "ord_" + strings.Repeat("9", 300)} {
			body, _ := json.Marshal(map[string]any{"type": "payment.succeeded", "data": map[string]string{"order_id": oid}})
			body = bytes.ToValidUTF8(body, nil)
			if oid == "\xff\xfe" { // raw invalid UTF-8 inside the JSON string
				body = []byte(`{"type":"payment.succeeded","data":{"order_id":"` + oid + `"}}`)
			}
			h := http.Header{}
			if err := signer.Sign(h, webhook.Delivery{ID: fmt.Sprintf("msg_%d", i), Timestamp: time.Now()}, body); err != nil {
				t.Fatal(err)
			}
			hdr := map[string]string{"Content-Type": "application/json"}
			for k := range h {
				hdr[k] = h.Get(k)
			}
			a := call(t, http.MethodPost, srv.URL+"/webhooks/payments", hdr, body)
			if a.status != http.StatusUnprocessableEntity {
				t.Errorf("order id %q: %d %s", oid, a.status, a.body)
			}
			noDBText(t, oid, a)
		}
	})
}

// TestTableClashSQLite: an SQLite file that already has an orders table of
// another shape stops the boxoffice with ErrTableClash naming the table,
// and the foreign table is left as it was.
func TestTableClashSQLite(t *testing.T) {
	d := testdb.SQLite(t)
	if _, err := d.DB().Exec(`CREATE TABLE invoices (x integer)`); err != nil {
		t.Fatal(err)
	}
	_, err := boxoffice.New[*sql.Tx](context.Background(), d, boxoffice.Config{Roles: []boxoffice.Role{boxoffice.RoleAPI}, WebhookSecrets: []string{testSecret}})
	if !errors.Is(err, boxoffice.ErrTableClash) || !strings.Contains(err.Error(), "table invoices") {
		t.Fatalf("New on a file with a foreign invoices table: %v", err)
	}
	var cols int
	if err := d.DB().QueryRow(`SELECT count(*) FROM pragma_table_info('invoices')`).Scan(&cols); err != nil || cols != 1 {
		t.Fatalf("foreign invoices table changed: %d columns, %v", cols, err)
	}
}

// TestTableClashPostgresSchema: the same check on PostgreSQL, for a table
// in idem's schema.
func TestTableClashPostgresSchema(t *testing.T) {
	d := testdb.SQLPostgres(t)
	if _, err := d.DB().Exec(`CREATE TABLE ` + d.Names().Schema + `.payments (y integer)`); err != nil {
		t.Fatal(err)
	}
	_, err := boxoffice.New[*sql.Tx](context.Background(), d, boxoffice.Config{Roles: []boxoffice.Role{boxoffice.RoleAPI}, WebhookSecrets: []string{testSecret}})
	if !errors.Is(err, boxoffice.ErrTableClash) || !strings.Contains(err.Error(), "table payments") {
		t.Fatalf("New with a foreign payments table: %v", err)
	}
}

// TestForeignTablesPostgres: a database whose public schema already has
// an application's own orders, invoices and payments tables (other
// columns): the boxoffice opens on it, keeps its tables in idem's schema,
// places and reads an order, and leaves the application's tables alone.
func TestForeignTablesPostgres(t *testing.T) {
	base := testdb.PostgresURL(t)
	ctx := context.Background()
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	// Closed by a cleanup, after the one dropping the database (cleanups
	// run last in, first out): a deferred Close ran before the drop, which
	// then failed on a closed pool and left a database behind every run.
	t.Cleanup(func() { _ = admin.Close() })
	name := fmt.Sprintf("boxoffice_foreign_%d", time.Now().UnixNano())
	if _, err := admin.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`); err != nil {
			t.Errorf("drop the test's database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	app, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	for _, s := range []string{`CREATE TABLE orders (id int)`, `CREATE TABLE invoices (x int)`, `CREATE TABLE payments (y int)`, `INSERT INTO orders VALUES (7)`} {
		if _, err := app.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	sys, err := boxoffice.Open(ctx, boxoffice.Options{DataDir: t.TempDir(), DatabaseURL: u.String(),
		Config: boxoffice.Config{Roles: []boxoffice.Role{boxoffice.RoleAPI}, WebhookSecrets: []string{testSecret}}})
	if err != nil {
		t.Fatalf("Open on a database with foreign orders/invoices/payments: %v", err)
	}
	defer sys.Close()
	srv := httptest.NewServer(sys.Handler())
	defer srv.Close()
	id := placeOrder(t, srv.URL, "k1")
	if a := call(t, http.MethodGet, srv.URL+"/orders/"+id, map[string]string{"X-Tenant-ID": "acme"}, nil); a.status != http.StatusOK {
		t.Fatalf("GET /orders/%s: %d %s", id, a.status, a.body)
	}
	if a := call(t, http.MethodGet, srv.URL+"/stats", nil, nil); a.status != http.StatusOK || !bytes.Contains(a.body, []byte(`"orders":1`)) {
		t.Fatalf("GET /stats: %d %s", a.status, a.body)
	}
	var n, cols int
	if err := app.QueryRowContext(ctx, `SELECT count(*) FROM public.orders WHERE id = 7`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the application's orders table changed: %d rows, %v", n, err)
	}
	if err := app.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name IN ('orders', 'invoices', 'payments')`).Scan(&cols); err != nil || cols != 3 {
		t.Fatalf("the application's tables changed: %d columns, %v", cols, err)
	}
	if err := app.QueryRowContext(ctx, `SELECT count(*) FROM idem.orders`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("idem.orders: %d rows, %v", n, err)
	}
}

// TestEmbeddedBrokerNeedsCredentials: with the embedded JetStream default,
// a local process that connects to its port without the password (or with
// the masked URL NATSURL prints) is refused, so it cannot publish forged
// order-events; the system's own relay and consumers still deliver.
func TestEmbeddedBrokerNeedsCredentials(t *testing.T) {
	ctx := context.Background()
	sys, err := boxoffice.Open(ctx, boxoffice.Options{DataDir: t.TempDir(), SQLiteSynchronous: "NORMAL",
		Config: boxoffice.Config{WebhookSecrets: []string{testSecret}, PollInterval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	if err := sys.Start(ctx); err != nil {
		t.Fatal(err)
	}
	printed := sys.NATSURL()
	u, err := url.Parse(printed)
	if err != nil {
		t.Fatal(err)
	}
	if pw, _ := u.User.Password(); pw != "xxxxx" {
		t.Fatalf("NATSURL %q does not mask the password", printed)
	}
	bare := "nats://" + u.Host
	for _, raw := range []string{bare, printed} {
		nc, err := nats.Connect(raw, nats.NoReconnect())
		if err == nil {
			_ = nc.Publish(boxoffice.Subject, []byte(`{}`))
			nc.Close()
			t.Fatalf("connected to the embedded broker with %s", raw)
		}
	}
	srv := httptest.NewServer(sys.Handler())
	defer srv.Close()
	placeOrder(t, srv.URL, "k1")
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := sys.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Invoices == 1 && st.EmailsSent == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the system's own clients did not deliver: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHostileOrderBodies: NUL, invalid UTF-8 and oversized values in every
// field of POST /orders answer 400 on every dialect, never a 5xx.
func TestHostileOrderBodies(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		_, srv := apiServer(t, e.D)
		fields := map[string][]string{
			"event_id":       {`"c\u0000"`, "\"c\xff\"", `"` + strings.Repeat("e", 65) + `"`},
			"customer_email": {`"a\u0000@example.com"`, "\"\xff@example.com\"", `"a@ex\u0000ample.com"`, `"` + strings.Repeat("a", 250) + `@example.com"`},
			"currency":       {`"E\u0000R"`, "\"E\xffR\""},
		}
		i := 0
		for field, vals := range fields {
			for _, v := range vals {
				var m map[string]json.RawMessage
				_ = json.Unmarshal([]byte(orderBody), &m)
				body := []byte(strings.Replace(orderBody, string(m[field]), v, 1))
				i++
				a := call(t, http.MethodPost, srv.URL+"/orders", map[string]string{"Idempotency-Key": fmt.Sprintf("h-%d", i), "Content-Type": "application/json"}, body)
				if a.status != http.StatusBadRequest || a.ctype != "application/problem+json" {
					t.Errorf("%s = %q: %d %s", field, v, a.status, a.body)
				}
				noDBText(t, field, a)
			}
		}
	})
}
