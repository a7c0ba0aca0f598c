package retention

// Interim: the expiries whose owners do not export them yet
// (outbox.Expire, saga.ExpireSteps and saga.Expire, and inbox expiry
// keeping some consumers longer). Each goes when its owner's lands; the
// text is the GC's former rules, with the states of migration 0010.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/idemkit/idem/store"
)

// batchDelete returns a statement deleting at most a batch of rows of
// table matching cond; the batch size is $limitArg.
func batchDelete(d store.Dialect, table, cond string, limitArg int) string {
	id := "rowid"
	if d == store.Postgres {
		id = "ctid"
	}
	return fmt.Sprintf(`DELETE FROM %[1]s WHERE %[2]s IN (SELECT %[2]s FROM %[1]s WHERE %[3]s LIMIT $%[4]d) AND %[3]s`,
		table, id, cond, limitArg)
}

func outboxExpire[TTx any](ctx context.Context, d store.Driver[TTx], horizon time.Time, limit int) (int64, error) {
	return d.Pool().Exec(ctx, batchDelete(d.Dialect(), d.Table("outbox"), `state = 'completed' AND published_at < $1`, 2),
		store.Micros(horizon), limit)
}

const sagaFinished = `state IN ('completed', 'compensated') AND updated_at < $1`

func sagaExpireSteps[TTx any](ctx context.Context, d store.Driver[TTx], horizon time.Time, limit int) (int64, error) {
	cond := `saga_id IN (SELECT saga_id FROM ` + d.Table("sagas") + ` WHERE ` + sagaFinished + `)`
	return d.Pool().Exec(ctx, batchDelete(d.Dialect(), d.Table("saga_steps"), cond, 2), store.Micros(horizon), limit)
}

func sagaExpire[TTx any](ctx context.Context, d store.Driver[TTx], horizon time.Time, limit int) (int64, error) {
	sagas := d.Table("sagas")
	cond := sagaFinished + ` AND NOT EXISTS (SELECT 1 FROM ` + d.Table("saga_steps") + ` st WHERE st.saga_id = ` + sagas + `.saga_id)`
	return d.Pool().Exec(ctx, batchDelete(d.Dialect(), sagas, cond, 2), store.Micros(horizon), limit)
}

func inboxExpireKeeping[TTx any](ctx context.Context, d store.Driver[TTx], horizon time.Time, limit int, keep map[string]time.Time) (int64, error) {
	cond, args := `expires_at < $1`, []any{store.Micros(horizon)}
	for _, c := range slices.Sorted(maps.Keys(keep)) {
		args = append(args, c, store.Micros(keep[c]))
		cond += fmt.Sprintf(` AND NOT (consumer = $%d AND received_at >= $%d)`, len(args)-1, len(args))
	}
	return d.Pool().Exec(ctx, batchDelete(d.Dialect(), d.Table("inbox"), cond, len(args)+1), append(args, limit)...)
}
