package sqlset

import "io/fs"

// Meta holds the statements on schema metadata: the migrations table
// (package migrate) and the version-guarded writes to the caller's own
// tables (package versionguard).
//
// migrations columns: version (the file's number, primary key), name,
// applied_at (microseconds).
type Meta struct {
	// Migrations are the dialect's versioned migration files
	// (NNNN_name.sql), which package migrate applies in order.
	Migrations fs.FS
	// Expand fills the placeholders of a migration file: {{t}} the table
	// qualifier ("schema". on PostgreSQL, the prefix on SQLite), {{p}} the
	// index-name prefix (empty on PostgreSQL, the prefix on SQLite) and
	// {{schema}} the PostgreSQL schema name.
	Expand func(migration string) string
	// MigrateLock takes the lock that serialises concurrent migrators for
	// the rest of the transaction (PostgreSQL: a transaction-level
	// advisory lock; "" where the write transaction serialises them
	// already). No arguments.
	MigrateLock string
	// CreateSchema creates the schema holding idem's tables if missing
	// ("" where there is none). No arguments.
	CreateSchema string
	// CreateMigrations creates the migrations table if missing. No
	// arguments.
	CreateMigrations string
	// RecordMigration records an applied migration. $1 version, $2 name,
	// $3 applied_at.
	RecordMigration string
	// AppliedMigrations reads version, applied_at of every applied
	// migration. No arguments.
	AppliedMigrations string

	// VersionGuard builds the statements of a write to a caller-owned
	// table conditional on its stored version (package versionguard). The
	// identifiers in w are plain identifiers already validated
	// ([A-Za-z_][A-Za-z0-9_]*, Table optionally "schema.table"); the
	// builder quotes them. Values are never part of the text.
	VersionGuard func(w VersionedWrite) VersionedSQL
}

// VersionedWrite names the parts of a version-guarded write.
type VersionedWrite struct {
	// Table is the table, optionally schema-qualified ("app.seats").
	Table string
	// Keys are the key columns identifying the row (the primary key, or a
	// unique constraint over exactly these columns when Upsert is set).
	Keys []string
	// Set are the written columns (neither key nor version), in the order
	// their values are bound.
	Set []string
	// Version is the version column.
	Version string
	// Upsert inserts the row when it is missing.
	Upsert bool
}

// VersionedSQL is the pair of statements of a [VersionedWrite].
type VersionedSQL struct {
	// Write writes the row only when its stored version is lower than the
	// new one (updating, or with Upsert inserting a missing row); it
	// affects 0 rows otherwise. Arguments: the key values in Keys order,
	// then the Set values in Set order, then the version.
	Write string
	// Current reads the stored version of the row. Arguments: the key
	// values in Keys order.
	Current string
}
