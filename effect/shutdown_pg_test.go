package effect

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// A worker stopped after the server committed its claim, but before it read
// the claimed rows, hands them back at once, uncalled and with the attempt
// not counted. A proxy holds the server's replies from the claim on. Before,
// the claim gave up with the stop and the effects stayed in progress until
// their lease ended, an attempt spent.
func TestStopAfterACommittedClaimReleasesIt(t *testing.T) {
	d, p := pgproxy.Pgx(t, func(c *pgxpool.Config) { c.MaxConns = 4 })
	direct, _ := testdb.PgxPool(t) // not through the proxy, whose replies are held
	ctx := context.Background()
	l, err := New[pgx.Tx](d, Config{Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InTx(ctx, d, func(tx pgx.Tx) error {
		for _, k := range []string{"a", "b", "c"} {
			if _, _, err := l.ScheduleTx(ctx, tx, Effect{Key: "stop:" + k, Kind: "mail"}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	count := func(state string) int {
		var n int
		if err := direct.QueryRow(ctx, `SELECT count(*) FROM `+d.Table("effects")+` WHERE state = $1`, state).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	w, err := NewWorker(l, WorkerConfig[pgx.Tx]{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	if err := w.Register("mail", func(context.Context, string, []byte) ([]byte, error) { calls.Add(1); return nil, nil }); err != nil {
		t.Fatal(err)
	}
	p.HoldRepliesAfter(func(m pgproxy.Message) bool { return strings.Contains(m.SQL(), "SKIP LOCKED") })
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	for deadline := time.Now().Add(30 * time.Second); !(p.Holding() && count("in_progress") == 3); {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the claim committed, its answer held")
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	time.Sleep(300 * time.Millisecond) // the stop reaches the worker's claim
	p.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := count("pending"); n != 3 || calls.Load() != 0 {
		t.Fatalf("%d effects pending, %d calls after the stop; want 3 handed back uncalled", n, calls.Load())
	}
	var attempts int
	if err := direct.QueryRow(ctx, `SELECT coalesce(max(attempts), 0) FROM `+d.Table("effects")).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 0 {
		t.Errorf("attempts %d after a stop, want 0 (not counted)", attempts)
	}
}
