package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/idem/internal/dsn"
)

// TestRiverPairs runs both River pairs for real (the peer harness built
// and run against PostgreSQL, River's tables in a schema of the run) and
// checks that each side measured work in every round: the idem side
// asserts every unit recorded completed (workEffects), the River side the
// same of river_job (the harness fails otherwise), and schedule's sides
// that every unit was new. The run's schemas, River's included, are gone
// after Close.
func TestRiverPairs(t *testing.T) {
	pg := os.Getenv("IDEM_TEST_POSTGRES_URL")
	if pg == "" {
		t.Skip("IDEM_TEST_POSTGRES_URL not set")
	}
	if testing.Short() {
		t.Skip("builds and runs the peer harness")
	}
	ctx := context.Background()
	e, err := Open(ctx, Config{Postgres: pg, SQLiteDir: t.TempDir(), Peers: []string{"river"}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var pairs []Pair
	for _, p := range e.Pairs() {
		if p.Name == "peer_river_schedule" || p.Name == "peer_river_work" {
			pairs = append(pairs, p)
		}
	}
	if len(pairs) != 2 {
		t.Fatalf("%d River pairs in the suite with Peers [river], want 2", len(pairs))
	}
	rep, err := Run(ctx, pairs, Options{Budget: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if r.A != "idem" || r.B != "river" || r.APerS <= 0 || r.BPerS <= 0 || r.Rounds != 3 {
			t.Errorf("%s: %+v, want idem and river measured over 3 rounds", r.Name, r)
		}
	}
	schemas := append([]string(nil), e.extraSchemas...)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := dsn.Open(ctx, pg, dsn.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rivers := 0
	for _, s := range schemas {
		if strings.HasSuffix(strings.TrimSuffix(s, s[strings.LastIndex(s, "_"):]), "_river") {
			rivers++
		}
		var n int
		if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1`, s).Scan(&n); err != nil || n != 0 {
			t.Errorf("schema %s: %d left after Close (%v)", s, n, err)
		}
	}
	if rivers != 2 {
		t.Errorf("River schemas %v, want one per pair", schemas)
	}
}
