package sqlset

// Partitions holds the statements of the partitioned layout: an opt-in
// layout (PostgreSQL only) in which the tables of Tables are
// range-partitioned by time (expires_at; the outbox by created_at), so
// that expiry drops whole partitions
// instead of deleting rows one by one (package retention: Partition,
// MaintainPartitions).
//
// A unique index of a partitioned PostgreSQL table must contain the
// partition key, so each table's primary key gains expires_at and no
// longer alone refuses a second record of one key with another expiry. In
// the partitioned layout the inserts that decide a duplicate
// (Inbox.Insert, InsertStrict, Claim, BatchInsert; HTTPKeys.Insert,
// InsertLocked, InsertStrict, InsertCompleted; Outbox.Enqueue, Insert;
// Effects.Schedule, Insert)
// therefore call functions the conversion creates: each takes a
// transaction-scoped advisory lock on the record's key, then inserts only
// if no record of that key exists in any partition, in a statement of its
// own (under READ COMMITTED it sees every record committed before the
// lock was granted). The primary key still refuses a duplicate within one
// partition (two inserts of one batch, say). The Set of a partitioned
// store (store.Names.Layout = store.LayoutPartitioned) holds those
// statements; the rest are the plain layout's.
//
// The statements below are run by package retention on a PostgreSQL
// store; they are not prepared by internal/storetest (Convert holds scripts,
// and the others call functions only Functions creates): the retention
// package's partition tests convert a store and run each of them.
type Partitions struct {
	// Tables names the partitioned tables, in conversion order, each with
	// the columns of its plain layout's primary key.
	Tables []PartitionedTable
	// Functions is the script creating the layout's maintenance functions
	// (CREATE OR REPLACE: run it on every conversion, before Convert); no
	// arguments.
	Functions string
	// Inserts is the script creating the functions the partitioned
	// layout's inserts call (they return the tables' row types, so it runs
	// after every table is converted); no arguments.
	Inserts string
	// Convert converts plain table $1 (text) with key columns $2 (text[]:
	// its primary key, or the unique index on exactly those columns) into
	// one partitioned by column $3 (text) inside the caller's transaction:
	// it locks and renames the table, creates the partitioned table (same
	// columns, defaults, checks and identity; primary key $2 + $3) with its
	// default partition, copies every row into it (an identity column
	// continues after them), drops the old table and recreates its other
	// indexes. The caller then adds the range
	// partitions (Add), which moves their rows out of the default one.
	Convert string
	// Converted reports whether table $1 (text) is partitioned; returns
	// one boolean.
	Converted string
	// Add creates partition $2 (name, text) of table $1 for partition key
	// $6 (text: the table's Column) in [$3, $4) (micros, bigint) unless it
	// exists, moving any rows of that range out of the default partition in
	// the same transaction; returns one boolean, true when it was created.
	// $5 is the lock timeout, as for Drop: creating a partition locks the
	// default one.
	Add string
	// List returns every partition of table $1: name, lower and upper
	// bound (micros; both 0 for the default partition), is-default, and the
	// planner's row estimate (reltuples, -1 when never analysed).
	List string
	// Keeps reports whether inbox partition $1 (name) holds a row that a
	// minimum age keeps: $2 consumers (text[]), $3 the received_at cut-off
	// of each (bigint[]): a row of consumer $2[i] received at or after
	// $3[i]. Returns one boolean.
	Keeps string
	// Drop detaches the partitions $2 (names, text[]) from table $1 and
	// drops them, in one transaction (the table's exclusive lock is taken
	// once). The caller has checked each one's upper bound is in the past
	// (every row in it has expired) and, for the inbox, that Keeps is
	// false; $3 is the lock timeout, as text ("2000ms"), so a detach that
	// would wait for long-running transactions gives up instead of
	// queueing every writer behind it.
	Drop string
	// DropPublished is Drop for the outbox, whose partitions (by
	// created_at) may still hold events to publish: under the outbox's
	// exclusive lock it detaches and drops those of partitions $1 (names,
	// text[]) in which every event is published, at or before $2 (micros,
	// bigint: now minus the outbox's retention), and returns their names
	// (text[]); the others are kept. $3 is the lock timeout, as for Drop.
	DropPublished string
}

// PartitionedTable is one table of the partitioned layout.
type PartitionedTable struct {
	// Name is the table's name (unqualified: "inbox").
	Name string
	// Key is the plain layout's primary key (or, for the outbox, its
	// unique key), the record's identity.
	Key []string
	// Column is the partition key: expires_at, or created_at for the
	// outbox (whose rows get no expiry: a published event is kept for the
	// outbox's retention after its publication).
	Column string
}
