// Package postgres is idem's PostgreSQL dialect: its schema migrations and every
// statement idem runs on PostgreSQL, with idem's table names qualified. Feature
// packages never hold SQL; they reach these statements through
// [store.Driver.Statements].
package postgres

import (
	"embed"
	"io/fs"

	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations returns the dialect's versioned migration files.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the directory is embedded above: unreachable
	}
	return sub
}

// Statements returns every statement idem runs, for tables named by n
// (n must already have its defaults; see [store.Names.WithDefaults]).
func Statements(n store.Names) *sqlset.Set {
	t := func(name string) string { return n.Table(store.Postgres, name) }
	in, ef, keys, ob := inbox(t), effects(t), httpKeys(t), outboxSQL(t, n)
	if n.Layout == store.LayoutPartitioned {
		in, ef, keys, ob = partitionedInbox(n, in), partitionedEffects(n, ef), partitionedKeys(n, keys), partitionedOutbox(n, ob)
	}
	return &sqlset.Set{
		Partitions:  partitions(n),
		Inbox:       in,
		HTTPKeys:    keys,
		Outbox:      ob,
		Effects:     ef,
		DeadLetters: deadLetters(t),
		Sagas:       sagas(t),
		Meta:        meta(t, n),
		Audit:       audit(t),
		Horizons:    horizons(t),
		SQLMeta:     sqlMeta(),
		NotNeeded:   notNeeded(n.Layout),
	}
}

// notNeeded is the Set's NotNeeded for layout.
func notNeeded(layout store.Layout) map[string]string {
	m := map[string]string{
		"Outbox.AcquireLease": "relays run concurrently on PostgreSQL, serialised per claim by the advisory locks (Outbox.LockClaim, Outbox.LockShared)",
		"Outbox.ReleaseLease": "no relay lease on PostgreSQL (see Outbox.AcquireLease)",
	}
	if layout == store.LayoutPartitioned {
		const why = "the partitioned layout's inbox_batch_insert decides duplicates (a strict insert on the partitioned table would not refuse one with another expiry)"
		for _, f := range []string{"Inbox.BatchInsertStrict", "Inbox.BatchStrictSavepoint", "Inbox.BatchStrictRelease", "Inbox.BatchStrictRollback"} {
			m[f] = why
		}
		m["Outbox.EnqueueOne"] = "the partitioned layout's outbox_enqueue decides duplicates across partitions (Outbox.Enqueue is used for one event too)"
	}
	return m
}
