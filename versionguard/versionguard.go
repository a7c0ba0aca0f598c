// Package versionguard applies events that may arrive out of order without
// letting an older one overwrite a newer state: every write is
// conditional on the stored version being lower than the event's.
//
//	UPDATE t SET cols…, version = $v WHERE key = … AND version < $v
//	INSERT INTO t … ON CONFLICT (key) DO UPDATE SET … WHERE t.version < excluded.version
//
// Applying versions 7, 9, 8 leaves 9: the 8 is reported stale and changes
// nothing. The decision is made by the database row itself, inside the
// caller's transaction (pgx or database/sql, through the store seam), so
// concurrent appliers need no lock of their own: the row lock taken by the
// write serialises them and the version comparison is re-checked against
// the committed row.
//
//	err := store.InTx(ctx, d, func(tx pgx.Tx) error {
//		r, err := versionguard.ApplyTx(ctx, d, tx, versionguard.Spec{
//			Table: "seats", KeyColumns: []string{"show_id"}, KeyValues: []any{ev.ShowID},
//			Set: map[string]any{"seats_left": ev.SeatsLeft}, Upsert: true,
//		}, ev.Version)
//		return err // r.Applied: the row holds ev.Version; r.Stale: an older or redelivered event, nothing written
//	})
//
// A redelivered event (same version as stored) is stale too, which makes the
// guard idempotent on its own.
package versionguard

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// Spec describes one guarded write to a caller-owned table.
type Spec struct {
	// Table is the table name, optionally schema-qualified ("app.seats").
	// Each part must be a plain identifier; it is quoted.
	Table string
	// KeyColumns and KeyValues identify the row (the table's primary key
	// or a unique constraint over exactly these columns when Upsert is set).
	KeyColumns []string
	KeyValues  []any
	// VersionColumn holds the version. Defaults to "version".
	VersionColumn string
	// Set holds the columns to write with their values (excluding the key
	// and version columns).
	Set map[string]any
	// Upsert inserts the row when it does not exist yet. Without it a
	// missing row is reported as Result.Missing and nothing is written.
	Upsert bool
}

// Result reports what Apply did.
type Result struct {
	// Applied is true when the row was written (inserted or updated).
	Applied bool
	// Stale is true when the stored version was already at or above the
	// event's: nothing was written.
	Stale bool
	// Missing is true when Upsert is off and no row has the key.
	Missing bool
	// Current is the stored version when the write was not applied and a
	// row exists.
	Current int64
}

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// checkIdent validates name as plain identifiers with at most one dot
// (schema.table); the dialect quotes them.
func checkIdent(name string) error {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return checks.Optionf("versionguard: %q: too many dots", name)
	}
	for _, p := range parts {
		if !identRe.MatchString(p) {
			return checks.Optionf("versionguard: %q is not a plain identifier", name)
		}
	}
	return nil
}

type built struct {
	sqlset.VersionedSQL
	writeArgs []any
	keyArgs   []any
}

func build(stmts *sqlset.Set, s Spec, version int64) (built, error) {
	var b built
	if stmts == nil || stmts.Meta.VersionGuard == nil {
		return b, checks.Optionf("versionguard: the driver's dialect has no version-guard statements")
	}
	if len(s.KeyColumns) == 0 || len(s.KeyColumns) != len(s.KeyValues) {
		return b, checks.Optionf("versionguard: %d key columns, %d key values", len(s.KeyColumns), len(s.KeyValues))
	}
	w := sqlset.VersionedWrite{Table: s.Table, Keys: s.KeyColumns, Version: cmpOr(s.VersionColumn, "version"), Upsert: s.Upsert}
	for c := range s.Set {
		w.Set = append(w.Set, c)
	}
	slices.Sort(w.Set) // deterministic SQL text
	for _, name := range append(append([]string{w.Table, w.Version}, w.Keys...), w.Set...) {
		if err := checkIdent(name); err != nil {
			return b, err
		}
	}
	b.VersionedSQL = stmts.Meta.VersionGuard(w)
	b.keyArgs = slices.Clone(s.KeyValues)
	b.writeArgs = slices.Clone(s.KeyValues)
	for _, c := range w.Set {
		b.writeArgs = append(b.writeArgs, s.Set[c])
	}
	b.writeArgs = append(b.writeArgs, version)
	return b, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Apply writes spec at version through q (a transaction's Querier for
// atomicity with the caller's other writes) and reports whether it was
// applied or stale. stmts are the driver's statements (store.Driver.Statements),
// which build the dialect's SQL. Identifiers are validated and quoted;
// values are bound parameters. On a retry or a redelivery of the same
// version the result is Stale and nothing changes.
func Apply(ctx context.Context, q store.Querier, stmts *sqlset.Set, spec Spec, version int64) (Result, error) {
	b, err := build(stmts, spec, version)
	if err != nil {
		return Result{}, err
	}
	// A write that changed nothing is read back: a row at this version or
	// a newer one makes it stale, no row (without Upsert) missing. A row
	// older than version means the row was created, or moved, between the
	// write and the read (each statement of a READ COMMITTED transaction
	// sees the latest commits): the write is tried again, so an event
	// never counts as stale against a version older than its own.
	for range staleReadTries {
		n, err := q.Exec(ctx, b.Write, b.writeArgs...)
		if err != nil {
			return Result{}, fmt.Errorf("versionguard: %s: %w", spec.Table, err)
		}
		if n > 0 {
			return Result{Applied: true}, nil
		}
		var cur int64
		err = q.QueryRow(ctx, b.Current, b.keyArgs...).Scan(&cur)
		switch {
		case errors.Is(err, store.ErrNoRows):
			return Result{Missing: true}, nil
		case err != nil:
			return Result{}, fmt.Errorf("versionguard: %s: read version: %w", spec.Table, err)
		case cur >= version:
			return Result{Stale: true, Current: cur}, nil
		}
	}
	return Result{}, fmt.Errorf("versionguard: %s: the row stayed older than version %d but the write changed nothing: %w", spec.Table, version, store.ErrSerialization)
}

// staleReadTries bounds the writes of Apply whose read-back finds the row
// older than the event's version.
const staleReadTries = 3

// ApplyTx is Apply inside the caller's transaction tx of driver d.
func ApplyTx[TTx any](ctx context.Context, d store.Driver[TTx], tx TTx, spec Spec, version int64) (Result, error) {
	return Apply(ctx, d.Tx(tx), d.Statements(), spec, version)
}

// Guard is Apply with an observer, e.g. metrics counting stale writes
// (idemmetrics.Metrics.ObserveVersionGuard). The zero Guard works.
type Guard struct {
	// Observe, if set, is called after every successful Apply with the table
	// and the result.
	Observe func(table string, r Result)
}

// Apply is [Apply] followed by g.Observe.
func (g Guard) Apply(ctx context.Context, q store.Querier, stmts *sqlset.Set, spec Spec, version int64) (Result, error) {
	r, err := Apply(ctx, q, stmts, spec, version)
	if err == nil && g.Observe != nil {
		g.Observe(spec.Table, r)
	}
	return r, err
}

// String returns "applied", "stale" or "missing", the result label of
// idemmetrics.Metrics.ObserveVersionGuard:
//
//	versionguard.Guard{Observe: func(t string, r versionguard.Result) { m.ObserveVersionGuard(t, r.String()) }}
func (r Result) String() string {
	switch {
	case r.Applied:
		return "applied"
	case r.Missing:
		return "missing"
	}
	return "stale"
}
