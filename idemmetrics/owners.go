package idemmetrics

import (
	"context"
	"fmt"

	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/store"
)

// Tables lists idem's tables that stats and row estimates cover, in the
// order of their migrations.
var Tables = []string{"inbox", "idempotency_keys", "outbox", "effects", "dead_letters"}

// counts returns the rows of idem's table name per stored state, as the
// table's owner counts them.
func counts[TTx any](ctx context.Context, d store.Driver[TTx], name string) (map[string]int64, error) {
	switch name {
	case "inbox":
		return operator.InboxCounts(ctx, d)
	case "idempotency_keys":
		return operator.HTTPKeyCounts(ctx, d)
	case "outbox":
		return operator.OutboxCounts(ctx, d)
	case "effects":
		return operator.EffectCounts(ctx, d)
	case "dead_letters":
		return operator.DLQCounts(ctx, d)
	}
	return nil, fmt.Errorf("idemmetrics: %q is not one of idem's tables", name)
}

// total is the sum of a count map.
func total(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// countsOf turns a count map into Counts (an empty map when m is nil).
func countsOf(m map[string]int64) Counts {
	if m == nil {
		m = map[string]int64{}
	}
	return Counts{Total: total(m), By: m}
}
