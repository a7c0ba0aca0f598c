package saga_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/saga"
)

// Expire deletes finished sagas with their barrier rows (steps first,
// at most limit rows per call) and never a running saga; Counts counts
// per stored state.
func TestExpireAndCounts(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, drv testdb.Driver) {
		d := drv.D
		f := newFixture(t, d, 5*time.Second)
		ctx := context.Background()
		if _, _, err := f.start(ctx, f.s, "o-done", 500); err != nil {
			t.Fatal(err)
		}
		stop := f.run(f.worker(f.s, 3))
		f.wait("o-done", saga.Completed)
		stop()
		if _, _, err := f.start(ctx, f.s, "o-open", 600); err != nil { // no worker: stays running
			t.Fatal(err)
		}
		counts, err := operator.SagaCounts(ctx, d)
		if err != nil || !maps.Equal(counts, map[string]int64{"completed": 1, "running": 1}) {
			t.Fatalf("Counts = %v, %v", counts, err)
		}
		steps := func(id string) int {
			return testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("saga_steps")+` WHERE saga_id = $1`, id)
		}
		if steps("o-done") != 3 {
			t.Fatalf("o-done has %d barrier rows, want 3", steps("o-done"))
		}
		// The horizon before the finish: nothing is old enough.
		if n, err := operator.SagaExpire(ctx, d, time.Now().Add(-time.Hour), 100); err != nil || n != 0 {
			t.Fatalf("Expire before the finish = %d, %v", n, err)
		}
		later := time.Now().Add(time.Hour)
		// Limit 2: two of the three steps, the saga stays.
		if n, err := operator.SagaExpire(ctx, d, later, 2); err != nil || n != 2 || steps("o-done") != 1 {
			t.Fatalf("Expire(limit 2) = %d, %v; %d steps left", n, err, steps("o-done"))
		}
		if _, err := f.s.Get(ctx, "o-done"); err != nil {
			t.Fatalf("saga deleted while its steps remain: %v", err)
		}
		// The last step, then the saga, in one call.
		if n, err := operator.SagaExpire(ctx, d, later, 2); err != nil || n != 2 {
			t.Fatalf("Expire(rest) = %d, %v", n, err)
		}
		if n, err := operator.SagaExpire(ctx, d, later, 2); err != nil || n != 0 {
			t.Fatalf("Expire(nothing left) = %d, %v", n, err)
		}
		counts, err = operator.SagaCounts(ctx, d)
		if err != nil || !maps.Equal(counts, map[string]int64{"running": 1}) {
			t.Fatalf("Counts after Expire = %v, %v (the running saga must stay)", counts, err)
		}
		if steps("o-done") != 0 {
			t.Fatal("barrier rows left without their saga")
		}
	})
}
