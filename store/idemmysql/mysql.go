// Package idemmysql is idem's MySQL and MariaDB dialect: its schema migrations,
// every statement idem runs on it, and a database/sql driver over
// github.com/go-sql-driver/mysql (handlers receive the caller's *sql.Tx).
// It is written for MySQL 8.0 and MariaDB 10.6+ alike and tested on
// MariaDB 10.11.
//
//	d, err := idemmysql.Open(ctx, "mysql://app:secret@db:3306/shop", idemmysql.Config{})
//	if err := migrate.Up(ctx, d); err != nil { … } // idem_* tables in the shop database
//	ib, err := inbox.New(d, inbox.Config{})
//	res, err := ib.Process(ctx, "billing", msg, func(ctx context.Context, tx *sql.Tx, msg idem.Message) error {
//		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES (?)`, msg.Key) // your *sql.Tx
//		return err
//	})
//	// a *sql.DB of your own: sql.Open("mysql", dsn) with dsn from idemmysql.DSN(url), then idemmysql.New(ctx, db, idemmysql.Config{})
//	// in tests: d := idemmysqltest.Open(t), a fresh migrated database per test
//
// Open a driver with [Open] on a mysql://user:pass@host:3306/db URL, or
// [New] on a *sql.DB opened with clientFoundRows=true ([DSN] builds such a
// DSN). idem's tables live in the connection's database, named with the
// prefix (default idem_).
//
// # How the guarantees hold on MySQL
//
// Differences from PostgreSQL, and why each guarantee still holds:
//
//   - No RETURNING (MySQL 8 has none; MariaDB lacks UPDATE … RETURNING). A
//     statement that returns the rows it wrote on PostgreSQL is a script
//     here: several statements run in order on the same transaction (see
//     the directives in script.go), for example a fenced UPDATE followed by
//     the SELECT of the row it updated, read in the same transaction under
//     the row lock the UPDATE holds. A script given to Driver.Pool runs in
//     a transaction of its own.
//   - ON CONFLICT DO NOTHING is a plain INSERT whose duplicate-key error
//     (1062) the driver turns into "no row affected": InnoDB rolls back the
//     statement only, the transaction goes on, and the dedup decision is
//     still the unique key's, in the caller's transaction. INSERT IGNORE is
//     not used: it would also turn a too-long identifier (truncated, so two
//     ids could collide) or a NULL into a warning. A batch insert is one
//     such INSERT per row, so existing rows are skipped one by one.
//   - Identifiers are VARBINARY, compared byte for byte as PostgreSQL
//     compares text: no collation folds case or ignores trailing spaces,
//     which would make two distinct message ids duplicates. Each column
//     is as wide as the longest value idem accepts for it, and the widths
//     that a feature checks are declared (Set.Limits), so an over-long
//     value is refused as input before it is sent. One that would still not
//     fit is an error, never truncated: every connection idem opens runs in
//     SQLMode (strict) whatever its URL asks, and New refuses a pool whose
//     sessions are not strict.
//   - A concurrent duplicate under REPEATABLE READ: the second INSERT waits
//     on the first transaction's key lock and fails with 1062 once it
//     commits. The reads that follow a conflict (Inbox.Select,
//     HTTPKeys.Load, Effects.Get, …) are shared locking reads (LOCK IN
//     SHARE MODE): they read the latest committed row whatever the
//     caller's snapshot, so the duplicate is seen even when the caller's
//     transaction read before, and their lock is compatible with the
//     shared lock InnoDB leaves on a key an INSERT collided with. The lease
//     claims (Inbox.Claim, HTTPKeys.Insert, Effects.Insert) first lock an
//     existing record exclusively (SELECT … FOR UPDATE), so recoverers
//     queue instead of deadlocking when each upgrades a shared lock to
//     take the record over.
//   - Deadlocks (1213) translate to store.ErrSerialization and lock wait
//     timeouts (1205) to store.ErrLockTimeout, which the features retry or
//     report as for PostgreSQL's 40P01/55P03. InnoDB's gap locks under
//     REPEATABLE READ can add deadlocks, never duplicates: idem's own
//     transactions (Driver.Begin, and Pool scripts) run READ COMMITTED,
//     which takes no gap locks; the caller's transaction keeps the
//     isolation the caller chose.
//   - Claims (outbox relay, effect worker) SELECT … FOR UPDATE SKIP LOCKED
//     the candidate rows, UPDATE them by key and read them back, in one
//     transaction: two claimers never take the same row.
//   - PostgreSQL's advisory transaction locks become row locks. The outbox
//     runs one relay at a time through the relay lease row (Outbox
//     AcquireLease, as on SQLite). Per-key order with concurrent
//     enqueuers: seqs are AUTO_INCREMENT values, allocated at insert and
//     not in commit order, so an enqueuer first locks one row per ordering
//     key of its events (INSERT … ON DUPLICATE KEY UPDATE into outbox_keys,
//     in key order so enqueuers do not deadlock on each other) and holds
//     the lock to its commit: a later event of the key is inserted — and
//     gets its seq — only after the earlier one committed, so a relay that
//     sees a seq of a key sees every earlier seq of that key.
//   - GET_LOCK is session-scoped, so it is used only for the migration
//     lock, in a transaction of Driver.Begin on a connection of its own,
//     released (RELEASE_ALL_LOCKS) once that transaction has committed or
//     rolled back — or the connection is discarded, which ends the
//     session. DDL commits implicitly in MySQL, so a migration is not
//     atomic as on PostgreSQL; the lock still keeps migrators apart.
//   - No LISTEN/NOTIFY (SupportsListener is false): relays and workers
//     poll. No pipelining through database/sql (SupportsPipeline false).
//   - Seq lists (JSON arrays) are read with JSON_TABLE.
//   - Affected rows count the rows an UPDATE matched, not only those it
//     changed (clientFoundRows, checked by New), so a fenced write that
//     changes nothing still proves the fence held.
package idemmysql

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

// Statements returns every statement idem runs on MySQL, for tables named
// by n (n must already have its defaults; see [store.Names.WithDefaults]).
func Statements(n store.Names) *sqlset.Set {
	t := func(name string) string { return n.Prefix + name }
	return &sqlset.Set{
		Inbox:       inbox(t),
		HTTPKeys:    httpKeys(t),
		Outbox:      outboxSQL(t),
		Effects:     effects(t),
		DeadLetters: deadLetters(t),
		Sagas:       sagas(t),
		Meta:        meta(t, n),
		Audit:       audit(t),
		Horizons:    horizons(t),
		SQLMeta:     sqlMeta(),
		// The widths of idempotency_keys' scope columns (migrations 0002,
		// 0016): VARBINARY, so bytes.
		Limits: sqlset.Limits{HTTPTenant: 512, HTTPOperation: 1024, HTTPKey: 1024},
		NotNeeded: map[string]string{
			"Inbox.BatchInsertStrict":    "no pipelining through database/sql: a strict first try would cost round trips of its own (Inbox.BatchInsert is used)",
			"Inbox.BatchStrictSavepoint": "there is no Inbox.BatchInsertStrict on this dialect",
			"Inbox.BatchStrictRelease":   "there is no Inbox.BatchInsertStrict on this dialect",
			"Inbox.BatchStrictRollback":  "there is no Inbox.BatchInsertStrict on this dialect",
			"HTTPKeys.InsertLocked":      "MySQL bounds a lock wait by innodb_lock_wait_timeout, a session variable in whole seconds with no per-statement form common to MySQL and MariaDB: a duplicate request waits on the key's row lock and a timeout (1205) is store.ErrLockTimeout (HTTPKeys.Insert is used)",
			"HTTPKeys.InsertStrict":      "there is no HTTPKeys.InsertLocked to pipeline on MySQL (and database/sql does not pipeline)",
			"HTTPKeys.TakeOverLocked":    "there is no HTTPKeys.InsertLocked on MySQL (HTTPKeys.TakeOver is used)",
			"HTTPKeys.LockKey":           "the session advisory lock of the pipelined PostgreSQL path (store.Driver.BeginReserved), which database/sql cannot take: the transactional path claims the key with HTTPKeys.Insert",
			"HTTPKeys.Unlock":            "there is no HTTPKeys.LockKey on MySQL",
			"Outbox.Enqueue":             "no arrays nor notifications: the events are inserted with Outbox.Insert, which locks their ordering keys first",
			"Outbox.EnqueueOne":          "there is no Outbox.Enqueue on this dialect: one event is inserted with Outbox.Insert too",
			"Outbox.LockShared":          "relays take turns through the relay lease (Outbox.AcquireLease); settling writes are fenced by claimed_by and row locks",
			"Outbox.LockClaim":           "relays take turns through the relay lease (Outbox.AcquireLease); the claim locks its rows with FOR UPDATE SKIP LOCKED",
			"Meta.CreateSchema":          "idem's tables live in the connection's database, named by the prefix",
			"Effects.CompleteBatch":      "no arrays: a batch of completions is its Effects.Complete statements in one transaction (one commit)",
			"Partitions":                 "the partitioned layout is PostgreSQL's (store.LayoutPartitioned): expiry keeps its bounded batch deletes (retention.GC)",
		},
	}
}

// Directives for a caller's own statements run through this driver's
// Querier (see script.go): SkipDuplicate before an INSERT makes a
// duplicate key affect no row (ON CONFLICT DO NOTHING); IfWritten between
// a write and a SELECT runs the SELECT only when the write matched a row
// (UPDATE … RETURNING: the row is read back in the same transaction under
// the write's row lock).
const (
	SkipDuplicate = "/*idem:nodup*/ "
	IfWritten     = ";\n/*idem:need*/ "
)
