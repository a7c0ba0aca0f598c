package bench

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/cmd/idem/idemproxy"
	upstreamnode "github.com/idemkit/idem/examples/upstream-node"
	"github.com/idemkit/idem/store"
)

// proxyPair returns proxy_vs_direct on the run's main store (PostgreSQL
// when configured, else SQLite), or false when node is not on PATH (the
// pair needs the example Node.js upstream).
func (e *Env) proxyPair() (Pair, bool) {
	if _, err := upstreamnode.Node(); err != nil {
		e.log.Warn("bench: node is not on PATH: proxy_vs_direct left out")
		return Pair{}, false
	}
	if e.hasPostgres() {
		return proxyVsDirect(e, e.pg), true
	}
	return proxyVsDirect(e, e.sqlite), true
}

// proxyVsDirect measures idem proxy in front of the example Node.js
// service (examples/upstream-node) against calling the service directly:
// 32 clients over loopback, a new Idempotency-Key per request on both
// sides (the direct side sends it too, and the service ignores it), so the
// ratio is what the proxy's two-phase record (insert with a lease, then
// the completion) and the extra hop cost per new key.
func proxyVsDirect[TTx any](e *Env, d store.Driver[TTx]) Pair {
	var (
		up                  *upstreamnode.Upstream
		proxyURL, directURL string
		stop                func() error
		seq                 atomic.Int64
	)
	c := httpClient()
	setup := func(ctx context.Context) error {
		var err error
		if up, err = upstreamnode.Start(context.WithoutCancel(ctx), 0); err != nil {
			return err
		}
		u, err := url.Parse(up.URL)
		if err != nil {
			return err
		}
		p, err := idemproxy.New(d, idemproxy.Config{Upstream: u, Routes: []idemproxy.Route{{
			Method: "POST", Path: "/orders", Operation: "bench.proxy." + e.runID,
			Tenant: idemproxy.TenantSource{}, Lease: 30 * time.Second,
		}}})
		if err != nil {
			return err
		}
		base, s, err := httpServer(p)
		if err != nil {
			return err
		}
		stop = func() error {
			err := s()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return errors.Join(err, p.Close(ctx))
		}
		proxyURL, directURL = base+"/orders", up.URL+"/orders"
		return nil
	}
	side := func(target *string) func(ctx context.Context, budget time.Duration) (Sample, error) {
		return func(ctx context.Context, budget time.Duration) (Sample, error) {
			return throughput(ctx, budget, httpClients, func(ctx context.Context, _ int) (int, error) {
				return 1, post(ctx, c, *target, "p-"+e.runID+"-"+strconv.FormatInt(seq.Add(1), 10), 201, false)
			})
		}
	}
	return Pair{Name: "proxy_vs_direct", Setup: setup,
		A: Side{Label: "idem proxy", Run: side(&proxyURL)},
		B: Side{Label: "direct", Run: side(&directURL)},
		Close: func() error {
			var err error
			if stop != nil {
				err = stop()
			}
			c.CloseIdleConnections()
			if up != nil {
				up.Stop()
			}
			return err
		},
	}
}
