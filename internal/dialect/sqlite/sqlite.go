// Package sqlite is idem's SQLite dialect: its schema migrations and every
// statement idem runs on SQLite, with idem's table names qualified. Feature
// packages never hold SQL; they reach these statements through
// [store.Driver.Statements].
package sqlite

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
	t := func(name string) string { return n.Table(store.SQLite, name) }
	return &sqlset.Set{
		Inbox:       inbox(t),
		HTTPKeys:    httpKeys(t),
		Outbox:      outboxSQL(t, n),
		Effects:     effects(t),
		DeadLetters: deadLetters(t),
		Sagas:       sagas(t),
		Meta:        meta(t, n),
		Audit:       audit(t),
		Horizons:    horizons(t),
		SQLMeta:     sqlMeta(),
		NotNeeded: map[string]string{
			"Inbox.BatchInsertStrict":    "SQLite does not pipeline: a strict first try would cost a statement of its own, and its ON CONFLICT is no dearer than the insert (Inbox.BatchInsert is used)",
			"Inbox.BatchStrictSavepoint": "there is no Inbox.BatchInsertStrict on this dialect",
			"Inbox.BatchStrictRelease":   "there is no Inbox.BatchInsertStrict on this dialect",
			"Inbox.BatchStrictRollback":  "there is no Inbox.BatchInsertStrict on this dialect",
			"Partitions":                 "SQLite has no table partitioning: expiry keeps its bounded batch deletes (retention.GC)",
			"HTTPKeys.InsertLocked":      "BEGIN IMMEDIATE serialises writers: a request never waits on a row lock, so there is no lock timeout to bound (HTTPKeys.Insert is used)",
			"HTTPKeys.InsertStrict":      "there is no HTTPKeys.InsertLocked to pipeline on SQLite",
			"HTTPKeys.TakeOverLocked":    "there is no HTTPKeys.InsertLocked on SQLite (HTTPKeys.TakeOver is used)",
			"HTTPKeys.LockKey":           "no advisory locks: BEGIN IMMEDIATE serialises writers, so the transaction itself is the key's lock",
			"HTTPKeys.Unlock":            "there is no HTTPKeys.LockKey on SQLite",
			"Outbox.Enqueue":             "SQLite serialises writers: no ordering-key locks nor notifications to fold into one statement, the events are inserted with Outbox.Insert",
			"Outbox.EnqueueOne":          "there is no Outbox.Enqueue on this dialect: one event is inserted with Outbox.Insert too",
			"Outbox.LockShared":          "SQLite serialises writers itself; no advisory locks",
			"Outbox.LockClaim":           "SQLite serialises writers itself, and the relay lease (Outbox.AcquireLease) serialises relays",
			"SQLMeta.EstimateRows":       "SQLite keeps no row estimate: the rows are counted",
			"Meta.MigrateLock":           "the migration's write transaction (BEGIN IMMEDIATE) serialises migrators",
			"Meta.CreateSchema":          "SQLite has no schemas: the table prefix names idem's tables",
			"Effects.CompleteBatch":      "no round trips to save in process: a batch of completions is its Effects.Complete statements in one write transaction (one commit, one write lock)",
		},
	}
}
