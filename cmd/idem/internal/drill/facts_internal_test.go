package drill

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestProjectionReport: when the search projection disagrees with the
// inventory, the settle error says which event is off, both versions,
// where the events stand (outbox and inbox counts per state) and where
// each newer event is (outbox, search inbox, dead letters) — what found
// the deadlocked search consumer of the processes scenario.
func TestProjectionReport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := Config{Orders: 20, Workers: 2, TempDir: t.TempDir(), Timeout: 30 * time.Second}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	r, err := newRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	e, err := r.newEnv(ctx, "report", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	if s := r.sendOrders(ctx, e, 10, "report", events5, public, 0, 1); s.err() != nil {
		t.Fatal(s.err())
	}
	if _, err := e.settle(ctx, facts.converged); err != nil {
		t.Fatal(err)
	}
	// Roll concert-0's projection back a version, as if its newest event
	// had been recorded without being applied (every event was consumed:
	// nothing writes the projection again).
	if _, err := e.sys.DB().Pool().Exec(ctx, `UPDATE event_availability SET version = version - 1, seats_left = seats_left + 1 WHERE event_id = 'concert-0'`); err != nil {
		t.Fatal(err)
	}
	r.cfg.Timeout = 10 * time.Millisecond
	_, err = e.settle(ctx, facts.converged)
	if err == nil {
		t.Fatal("settled with the projection off")
	}
	// Every event was published and recorded by the three consumers
	// (10 orders: 10 outbox events, 30 inbox records), none
	// dead-lettered: concert-0's newest event (its second, version 2) was
	// recorded without being applied, and the report says where it is
	// (its outbox row stored as completed since migration 0010: published).
	for _, want := range []string{"projection_off=1", "search projection off;", "concert-0: inventory version=2 seats_left=",
		"projection version=1 seats_left=", "outbox 10 published, 0 pending, 0 parked",
		"inbox records 30 completed, 0 in progress, 0 failed", "2 events in the outbox, 1 newer than the projection",
		"version=2 outbox=published search_inbox=completed dead_letter=none"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("settle error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "concert-1") {
		t.Errorf("settle error names an event whose projection is right:\n%v", err)
	}
}
