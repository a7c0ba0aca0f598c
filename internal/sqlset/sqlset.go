// Package sqlset declares the statements idem runs, one field per
// statement, grouped by the feature that owns the table. It holds no SQL:
// each dialect package (internal/dialect/postgres, internal/dialect/sqlite) fills a [Set] with its
// own text, and a driver hands it to the features through
// store.Driver.Statements.
//
// Conventions every dialect follows, so that feature code is the same on
// all of them:
//   - arguments are positional and documented on each field; a dialect
//     with ? placeholders binds them in the documented order;
//   - timestamps are BIGINT microseconds since the Unix epoch;
//   - a statement a dialect does not need (an advisory lock on a database
//     that serialises writers anyway) is the empty string, and the feature
//     skips it.
//
// The conformance suite in internal/storetest prepares every statement of the
// Set on every driver, so a statement that does not parse, or names a
// column the migrations do not create, fails there first.
package sqlset

// Set is every statement idem runs, for one dialect and one set of table
// names.
type Set struct {
	Inbox       Inbox
	HTTPKeys    HTTPKeys
	Outbox      Outbox
	Effects     Effects
	DeadLetters DeadLetters
	Sagas       Sagas
	Meta        Meta
	Audit       Audit
	Horizons    Horizons
	SQLMeta     SQLMeta
	// Partitions is the partitioned layout's statements (PostgreSQL); nil
	// where the dialect has no such layout (listed in NotNeeded).
	Partitions *Partitions

	// Limits are the longest values the dialect's columns hold, where that
	// is below what idem itself accepts; features refuse a longer value
	// before it reaches the store.
	Limits Limits

	// NotNeeded names, by field path ("Outbox.LockClaim"), the statements
	// this dialect leaves empty on purpose, each with the reason. The
	// conformance suite (internal/storetest) fails on an empty statement not
	// listed here — a field a new dialect forgot — and on a listed one
	// that is not empty.
	NotNeeded map[string]string
}

// Limits are the longest values, in bytes, a dialect's columns hold. A
// field is 0 when the dialect adds no limit of its own (PostgreSQL and
// SQLite text): the feature's own limit applies (idemhttp.MaxTenantLen,
// …). A feature takes the smaller of its limit and the dialect's and
// refuses a longer value as client input (idemhttp: 401 for a tenant, 400
// for an operation or key), never as a store failure.
type Limits struct {
	// HTTPTenant, HTTPOperation and HTTPKey bound the scope of an HTTP
	// idempotency key record (tenant, operation, idem_key).
	HTTPTenant, HTTPOperation, HTTPKey int
}
