package operator

import (
	"context"
	"time"

	"github.com/idemkit/idem/store"
)

// The effects table (package effect): its counts and its expiry.

// EffectExpire deletes up to limit completed effects whose expires_at (set
// from effect.Config.Retention when they completed; 0 keeps them) passed
// before horizon, and returns the number deleted (0 when limit ≤ 0).
// Pending, in_progress (held included) and failed effects are never
// deleted. The retention GC calls it in batches.
func EffectExpire(ctx context.Context, d DB, horizon time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, nil
	}
	n, err := expire(ctx, d, "effect: expire", d.Statements().Effects.Expire, horizon, limit)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// EffectCounts returns the number of effects per stored state ("pending",
// "in_progress", "completed", "failed"); a state without effects is
// absent. Held effects (effect.Effect.HeldAt) are stored in_progress and
// counted there; [EffectCountHeld] counts them apart.
func EffectCounts(ctx context.Context, d DB) (map[string]int64, error) {
	return countBy(ctx, d, "effect: counts", d.Statements().Effects.CountByState)
}

// EffectCountHeld returns the number of effects held for reconciliation
// (see effect.WithKeyLifetime) per kind; a kind without held effects is
// absent.
func EffectCountHeld(ctx context.Context, d DB) (map[string]int64, error) {
	return countBy(ctx, d, "effect: count held", d.Statements().Effects.CountHeld)
}

// EffectCountAbandoned returns the number of in_progress effects whose
// lease ended by now: their worker crashed or hung (held effects, which
// have no lease, are included).
func EffectCountAbandoned(ctx context.Context, d DB, now time.Time) (int64, error) {
	return countOne(ctx, d, "effect: count abandoned", d.Statements().Effects.CountAbandoned, store.Micros(now))
}

// EffectCountsByKind returns the number of effects per kind, every state
// counted; a kind without effects is absent. Inline effects
// (effect.Ledger.Do) have the empty kind.
func EffectCountsByKind(ctx context.Context, d DB) (map[string]int64, error) {
	return countBy(ctx, d, "effect: counts by kind", d.Statements().Effects.CountByKind)
}
