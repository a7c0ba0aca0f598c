package idemmetrics

// Interim: inbox counts by consumer (Stats.Inbox), until package inbox
// exports them; then this file goes.

import (
	"context"

	"github.com/idemkit/idem/store"
)

func inboxByConsumer[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	return store.CountBy(ctx, d.Pool(), `SELECT consumer, count(*) FROM `+d.Table("inbox")+` GROUP BY consumer`)
}
