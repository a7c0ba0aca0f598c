package idemproxy_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idem/cmd/idem/idemproxy"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store/sqlstore"
)

// The proxy puts the Idempotency-Key contract in front of a service that
// knows nothing about it (here a Go handler standing for any language):
// the retry is replayed from the proxy's record and the upstream runs
// once; the same key with another body answers 422. Everything runs on
// loopback with a SQLite file: no other service is needed.
func Example() {
	ctx := context.Background()
	var calls atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, n)
	}))
	defer upstream.Close()

	dir, err := os.MkdirTemp("", "idemproxy-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	d, err := sqlstore.OpenSQLite(filepath.Join(dir, "proxy.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	if err := migrate.Up(ctx, d); err != nil {
		panic(err)
	}

	route, err := idemproxy.ParseRoute("POST /orders=orders.create")
	if err != nil {
		panic(err)
	}
	up, _ := url.Parse(upstream.URL)
	p, err := idemproxy.New(d, idemproxy.Config{
		Upstream: up,
		Routes:   []idemproxy.Route{route},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	defer p.Close(ctx)
	proxy := httptest.NewServer(p)
	defer proxy.Close()

	post := func(key, body string) {
		req, _ := http.NewRequest(http.MethodPost, proxy.URL+"/orders", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusUnprocessableEntity {
			b = []byte(resp.Header.Get("Content-Type"))
		}
		fmt.Println(resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), strings.TrimSpace(string(b)))
	}
	post("k-1", `{"item":"ticket"}`) // executes
	post("k-1", `{"item":"ticket"}`) // the client's retry: replayed
	post("k-1", `{"item":"poster"}`) // the key reused for another payload
	fmt.Println("upstream calls:", calls.Load())
	// Output:
	// 201  {"order":1}
	// 201 true {"order":1}
	// 422  application/problem+json
	// upstream calls: 1
}
