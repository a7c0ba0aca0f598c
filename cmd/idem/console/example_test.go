package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/idemkit/idem/cmd/idem/console"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store/sqlstore"
)

// Example mounts the console on an application's mux. Without the token a
// browser is sent to the login form; with it the pages answer.
func Example() {
	dir, _ := os.MkdirTemp("", "console-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // stops the sampler
	d, err := sqlstore.OpenSQLite(filepath.Join(dir, "idem.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	if err := migrate.Up(ctx, d); err != nil { // 0006_audit holds the audit log
		panic(err)
	}
	c, err := console.New(d, console.Config{Token: "a-long-random-operator-token"}) // Publisher: a broker.Publisher enables redrive
	if err != nil {
		panic(err)
	}
	go func() { _ = c.Run(ctx) }() // samples the overview's charts
	mux := http.NewServeMux()
	mux.Handle("/console/", c.Handler())

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("GET", "/console/dlq", nil))
	fmt.Println(w.Code, w.Header().Get("Location"))

	r := httptest.NewRequest("GET", "/console/dlq", nil)
	r.Header.Set("Authorization", "Bearer a-long-random-operator-token")
	w = httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	fmt.Println(w.Code)
	// Output:
	// 303 /console/login?next=%2Fconsole%2Fdlq
	// 200
}
