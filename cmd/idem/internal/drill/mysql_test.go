package drill_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/idem/internal/drill"
)

// tWriter writes the drill components' logs to the test log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

// TestDrillMySQL runs a few scenarios, shortened, on MySQL/MariaDB (a
// fresh database per scenario on IDEM_TEST_MYSQL_URL's server, dropped
// afterwards): the HTTP key path under racing duplicates and lost
// responses, crashes between commit and ack, and a saga.
func TestDrillMySQL(t *testing.T) {
	u := os.Getenv("IDEM_TEST_MYSQL_URL")
	if u == "" {
		t.Skip("IDEM_TEST_MYSQL_URL is not set: skipping the drill on MySQL")
	}
	scenarios := []string{"lost-response", "racing-duplicates", "crash-before-ack", "saga-duplicate-start", "replay-equivalence", "key-reuse", "out-of-order"}
	log := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rep, err := drill.Run(context.Background(), drill.Config{Orders: 120, Workers: 4, DatabaseURL: u,
		Scenarios: scenarios, TempDir: t.TempDir(), Timeout: 90 * time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	check(t, rep, len(scenarios))
}
