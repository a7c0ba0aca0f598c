package effect

import "github.com/idemkit/idem/store"

// scanEffect reads a row of a statement returning an effect, in the column
// order sqlset.Effects documents.
func scanEffect(r store.Row) (Effect, error) {
	var (
		e                                  Effect
		state                              string
		lease, next, created, upd, cmp, ex int64
		attempts, first, held              int64
	)
	err := r.Scan(&e.Key, &e.Kind, &e.Payload, &e.fingerprint, &state, &attempts, &e.Token, &lease,
		&next, &e.Result, &e.LastError, &created, &upd, &cmp, &ex, &e.TraceParent, &e.TraceState, &first, &held)
	if err != nil {
		return Effect{}, err
	}
	e.State = State(state)
	e.Attempts = int(attempts)
	e.LeaseUntil = store.FromMicros(lease)
	e.NextAttemptAt = store.FromMicros(next)
	e.CreatedAt = store.FromMicros(created)
	e.UpdatedAt = store.FromMicros(upd)
	e.CompletedAt = store.FromMicros(cmp)
	e.ExpiresAt = store.FromMicros(ex)
	e.FirstAttemptAt = store.FromMicros(first)
	e.HeldAt = store.FromMicros(held)
	return e, nil
}
