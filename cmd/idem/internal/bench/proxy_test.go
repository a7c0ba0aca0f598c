package bench

import (
	"context"
	"os"
	"testing"
	"time"
)

// proxy_vs_direct runs (a short budget; IDEM_BENCH_PROXY_BUDGET=10s for a
// real measurement) and reports a positive ratio.
func TestProxyVsDirect(t *testing.T) {
	ctx := context.Background()
	e, err := Open(ctx, Config{Postgres: os.Getenv("IDEM_TEST_POSTGRES_URL")})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p, ok := e.proxyPair()
	if !ok {
		t.Skip("node is not on PATH: proxy_vs_direct needs the Node.js upstream")
	}
	budget := 3 * time.Second
	if v, err := time.ParseDuration(os.Getenv("IDEM_BENCH_PROXY_BUDGET")); err == nil && v > 0 {
		budget = v
	}
	rep, err := Run(ctx, []Pair{p}, Options{Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Results[0]
	if r.Name != "proxy_vs_direct" || r.APerS <= 0 || r.BPerS <= 0 || r.Ratio <= 0 {
		t.Fatalf("result %+v", r)
	}
	t.Logf("%s: %s %.0f/s, %s %.0f/s, ratio %.3f", r.Name, r.A, r.APerS, r.B, r.BPerS, r.Ratio)
}
