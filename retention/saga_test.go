package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// A finished saga whose steps remain (a pass stopped between the two
// tables) is not deleted by the sagas' rule before its steps are: no step
// is ever left without its saga.
func TestSagaRetentionSagaWaitsForItsSteps(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testSagaWaitsForItsSteps(t, e.D) }, testdb.NoSQLPostgres)
}

func testSagaWaitsForItsSteps[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	old := store.Micros(time.Now().Add(-40 * 24 * time.Hour))
	sg := `INSERT INTO ` + d.Table("sagas") + ` (saga_id, name, fingerprint, input, state, step, steps, current_key, created_at, updated_at)
 VALUES ($1, 'order', $2, $2, 'completed', 0, 1, 'k', $3, $3)`
	testdb.Exec(t, d, sg, "with-steps", []byte{0}, old)
	testdb.Exec(t, d, sg, "without-steps", []byte{0}, old)
	testdb.Exec(t, d, `INSERT INTO `+d.Table("saga_steps")+` (saga_id, step, op, step_name, origin, outcome, created_at, updated_at)
 VALUES ('with-steps', 0, 'do', 's', 'do', 'applied', 0, 0)`)
	n, err := operator.SagaExpireSagas(ctx, d, store.FromMicros(old+1), 100)
	if err != nil || n != 1 {
		t.Fatalf("sagas' rule deleted %d, %v; want only the saga without steps", n, err)
	}
	if c := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("sagas")+` WHERE saga_id = 'with-steps'`); c != 1 {
		t.Fatal("a saga whose steps remain was deleted")
	}
}
