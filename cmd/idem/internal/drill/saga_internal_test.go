package drill

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
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

// TestSagaCrashProcess runs saga-crash-after-step with --processes: the
// saga worker is an idem worker child SIGKILLed right after the provider
// made each of the first charges, before it could record them.
func TestSagaCrashProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the idem binary")
	}
	exe := filepath.Join(t.TempDir(), "idem")
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/idemkit/idem/cmd/idem").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := Config{Orders: 120, Workers: 4, TempDir: t.TempDir(), Seed: 7, Timeout: 60 * time.Second, Processes: true, Executable: exe}
	if pg, nats := os.Getenv("IDEM_TEST_POSTGRES_URL"), os.Getenv("IDEM_TEST_NATS_URL"); pg != "" && nats != "" {
		cfg.DatabaseURL, cfg.NATSURL = pg, nats
	}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	r, err := newRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	res := r.runScenario(context.Background(), sagaScenarios()[0])
	t.Logf("%s: pass=%v %v\n  expected: %s\n  observed: %s", res.Name, res.Pass, res.Duration.Round(time.Millisecond), res.Expected, res.Observed)
	if !res.Pass {
		t.Fatalf("%s failed: %s", res.Name, res.Error)
	}
}
