package retention

// Interim: inbox expiry keeping some consumers' rows longer
// (Config.InboxMinAge), until package inbox exports it; the text is the
// GC's former rule.

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

func inboxExpireKeeping[TTx any](ctx context.Context, d store.Driver[TTx], horizon time.Time, limit int, keep map[string]time.Time) (int64, error) {
	cond, args := `expires_at < $1`, []any{store.Micros(horizon)}
	for _, c := range slices.Sorted(maps.Keys(keep)) {
		args = append(args, c, store.Micros(keep[c]))
		cond += fmt.Sprintf(` AND NOT (consumer = $%d AND received_at >= $%d)`, len(args)-1, len(args))
	}
	return d.Pool().Exec(ctx, batchDelete(d.Dialect(), d.Table("inbox"), cond, len(args)+1), append(args, limit)...)
}
