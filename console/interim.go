package console

// Interim: the counts whose owners do not export them yet (dlq: letters of
// one error class; effect: in_progress effects whose lease ended). Each
// goes when its owner's function lands.

import (
	"context"
	"time"

	"github.com/idemkit/idem/store"
)

// countConflictLetters counts the dead letters parked for a message id
// reused with a different payload: the fingerprint conflicts of the
// consumers, which the database knows whichever process saw them.
func countConflictLetters[TTx any](ctx context.Context, d store.Driver[TTx]) (int64, error) {
	var n int64
	err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM `+d.Table("dead_letters")+` WHERE error_class = 'fingerprint_mismatch'`).Scan(&n)
	return n, err
}

// countAbandonedEffects counts the effects in progress whose lease ended
// by now (held ones, which have none, included).
func countAbandonedEffects[TTx any](ctx context.Context, d store.Driver[TTx], now time.Time) (int64, error) {
	var n int64
	err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM `+d.Table("effects")+` WHERE state = 'in_progress' AND lease_until <= $1`,
		store.Micros(now)).Scan(&n)
	return n, err
}
