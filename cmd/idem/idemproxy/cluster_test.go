package idemproxy_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/idem/idemproxy"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
)

// clusterKeys is the number of keys of TestTwoProxiesOnePostgres: 1,000
// (about 4 s under -race on two cores), 200 under -short, or
// IDEM_PROXY_CLUSTER_KEYS.
func clusterKeys() int {
	if v, err := strconv.Atoi(os.Getenv("IDEM_PROXY_CLUSTER_KEYS")); err == nil && v > 0 {
		return v
	}
	if testing.Short() {
		return 200
	}
	return 1000
}

// Two proxy instances, each with its own connection pool, on one
// PostgreSQL schema, in front of one Node.js upstream: every key is sent
// four times at once (two duplicates through each proxy). The upstream
// executes each key exactly once and no answer is a 5xx.
func TestTwoProxiesOnePostgres(t *testing.T) {
	conn, schema := testdb.PostgresSchema(t)
	up := nodeUpstream(t, 0)
	names := store.Names{Schema: schema}
	open := func() *pgxstore.Driver {
		d, err := pgxstore.Open(context.Background(), conn, pgxstore.Config{Names: names})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return d
	}
	da, db := open(), open()
	if err := migrate.Up(context.Background(), da); err != nil {
		t.Fatal(err)
	}
	rt := idemproxy.Route{Method: "POST", Path: "/orders", Operation: "orders.create",
		Tenant: idemproxy.TenantSource{Header: "X-Tenant-ID"}, WaitForInFlight: 20 * time.Second}
	pa := startProxy(t, da, up.URL, idemproxy.Config{Routes: []idemproxy.Route{rt}})
	pb := startProxy(t, db, up.URL, idemproxy.Config{Routes: []idemproxy.Route{rt}})

	n := clusterKeys()
	t.Logf("%d keys x 4 concurrent duplicates through two proxies", n)
	var (
		wg       sync.WaitGroup
		sem      = make(chan struct{}, 32)
		fivexx   atomic.Int64
		inflight atomic.Int64
		fresh    atomic.Int64 // 201 without Idempotent-Replayed
		replays  atomic.Int64
		failures atomic.Int64
	)
	for i := range n {
		key := "cluster-" + strconv.Itoa(i)
		for dup := range 4 {
			base := pa.URL
			if dup%2 == 1 {
				base = pb.URL
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				a, err := sendErr(base, call{key: key, tenant: "acme", body: `{"sku":"` + key + `"}`})
				switch {
				case err != nil:
					failures.Add(1)
					t.Errorf("%s: %v", key, err)
				case a.status >= 500:
					fivexx.Add(1)
					t.Errorf("%s: %d %s", key, a.status, a.body)
				case a.status == 409:
					inflight.Add(1)
				case a.status != 201:
					failures.Add(1)
					t.Errorf("%s: status %d %s", key, a.status, a.body)
				case a.header.Get("Idempotent-Replayed") == "true":
					replays.Add(1)
				default:
					fresh.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	c := executions(t, up)
	if c.Executions != n {
		t.Errorf("%d upstream executions for %d keys, want exactly %d", c.Executions, n, n)
	}
	for k, v := range c.ByKey {
		if v != 1 {
			t.Errorf("key %s executed %d times", k, v)
		}
	}
	if fivexx.Load() != 0 || failures.Load() != 0 {
		t.Fatalf("%d 5xx answers, %d other failures", fivexx.Load(), failures.Load())
	}
	if fresh.Load() != int64(n) {
		t.Fatalf("%d answers were fresh executions, want %d (one per key)", fresh.Load(), n)
	}
	t.Logf("%d executions, %d duplicates replayed, %d answered 409 in flight, 0 5xx", c.Executions, replays.Load(), inflight.Load())
	// Every key's answer was recorded: one more retry of each replays.
	for i := range n {
		key := "cluster-" + strconv.Itoa(i)
		rec, err := idemhttp.Lookup(context.Background(), db, "acme", "orders.create", key)
		if err != nil || rec.State != idemhttp.StateCompleted {
			t.Fatalf("%s: record %+v, %v; want completed", key, rec, err)
		}
	}
}
