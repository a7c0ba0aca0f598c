package drill

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestSagaScenarios runs each saga scenario, shortened, on the embedded
// default and, when IDEM_TEST_POSTGRES_URL and IDEM_TEST_NATS_URL are set,
// on PostgreSQL + NATS; every invariant must hold.
func TestSagaScenarios(t *testing.T) {
	targets := map[string]Config{"embedded": {}}
	if pg, nats := os.Getenv("IDEM_TEST_POSTGRES_URL"), os.Getenv("IDEM_TEST_NATS_URL"); pg != "" && nats != "" {
		targets["servers"] = Config{DatabaseURL: pg, NATSURL: nats}
	}
	for name, cfg := range targets {
		t.Run(name, func(t *testing.T) {
			cfg.Orders, cfg.Workers, cfg.TempDir, cfg.Seed, cfg.Timeout = 120, 4, t.TempDir(), 7, 60*time.Second
			if err := cfg.defaults(); err != nil {
				t.Fatal(err)
			}
			r, err := newRunner(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer r.close()
			for _, s := range sagaScenarios() {
				res := r.runScenario(context.Background(), s)
				t.Logf("%s: pass=%v %v\n  expected: %s\n  observed: %s", res.Name, res.Pass, res.Duration.Round(time.Millisecond), res.Expected, res.Observed)
				if !res.Pass {
					t.Errorf("%s failed: %s", res.Name, res.Error)
				}
			}
		})
	}
}
