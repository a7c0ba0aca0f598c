package idemhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store/sqlstore"
)

// openExampleDB opens a migrated SQLite database with an orders table.
func openExampleDB() (*sqlstore.Driver, func()) {
	dir, err := os.MkdirTemp("", "idemhttp-example")
	if err != nil {
		log.Fatal(err)
	}
	// The program links the SQLite driver: import _ "modernc.org/sqlite".
	d, err := sqlstore.OpenSQLite(filepath.Join(dir, "idem.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := migrate.Up(ctx, d); err != nil {
		log.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `CREATE TABLE orders (id integer PRIMARY KEY, customer text, item text)`); err != nil {
		log.Fatal(err)
	}
	return d, func() { d.Close(); os.RemoveAll(dir) }
}

// tenantFromAuth scopes keys by the authenticated user.
func tenantFromAuth(r *http.Request) (string, error) {
	user, _, ok := r.BasicAuth()
	if !ok {
		return "", errors.New("unauthenticated")
	}
	return user, nil
}

// createOrder is an ordinary handler: it runs its INSERT on the request
// transaction, which the middleware commits with the key record.
func createOrder(w http.ResponseWriter, r *http.Request) {
	tx, ok := idemhttp.SQLTx(r.Context())
	if !ok {
		http.Error(w, "no transaction", http.StatusInternalServerError)
		return
	}
	var in struct {
		Item string `json:"item"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest) // 400: not stored, the key may be reused
		return
	}
	user, _, _ := r.BasicAuth()
	res, err := tx.ExecContext(r.Context(), `INSERT INTO orders (customer, item) VALUES ($1, $2)`, user, in.Item)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError) // 5xx: rolled back, never stored
		return
	}
	id, _ := res.LastInsertId()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", id))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%d,"item":%q}`+"\n", id, in.Item)
}

func send(h http.Handler, user, key, body string) {
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
	r.SetBasicAuth(user, "secret")
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Printf("%d %s replayed=%q %s", w.Code, w.Header().Get("Location"), w.Header().Get("Idempotent-Replayed"), w.Body.String())
}

// The middleware on a standard library ServeMux route: the operation is
// "POST /orders" (from r.Pattern), the tenant is the authenticated user.
func Example() {
	d, done := openExampleDB()
	defer done()
	mw, err := idemhttp.New(d, idemhttp.Config{Tenant: tenantFromAuth})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.Handler(http.HandlerFunc(createOrder)))

	send(mux, "alice", "order-1", `{"item":"ticket"}`)
	send(mux, "alice", "order-1", `{ "item" : "ticket" }`) // a retry: replayed, not executed
	send(mux, "bob", "order-1", `{"item":"ticket"}`)       // another tenant: its own record
	send(mux, "alice", "order-1", `{"item":"poster"}`)     // same key, other payload: 422
	// Output:
	// 201 /orders/1 replayed="" {"id":1,"item":"ticket"}
	// 201 /orders/1 replayed="true" {"id":1,"item":"ticket"}
	// 201 /orders/2 replayed="" {"id":2,"item":"ticket"}
	// 422  replayed="" {"type":"https://pkg.go.dev/github.com/idemkit/idem/idemhttp#TypeKeyReused","title":"Idempotency-Key reused with a different request","status":422,"idempotency_key":"order-1"}
}

// Two-phase mode for a handler whose effect is outside the database (here
// a call to another service): the key is propagated downstream.
func ExampleNew_twoPhase() {
	d, done := openExampleDB()
	defer done()
	mw, err := idemhttp.New(d, idemhttp.Config{Mode: idemhttp.TwoPhase, Tenant: tenantFromAuth})
	if err != nil {
		log.Fatal(err)
	}
	calls := 0
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++ // e.g. provider.Charge(ctx, amount, idempotencyKey = idemhttp.Key(r.Context()))
		fmt.Fprintf(w, "charged with downstream key %s\n", idemhttp.Key(r.Context()))
	})
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.Handler(charge))
	send(mux, "alice", "pay-1", `{"amount":100}`)
	send(mux, "alice", "pay-1", `{"amount":100}`)
	fmt.Println("calls:", calls)
	// Output:
	// 200  replayed="" charged with downstream key pay-1
	// 200  replayed="true" charged with downstream key pay-1
	// calls: 1
}
