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

	"github.com/idemkit/idem"
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

func quote(name string) (string, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "", idem.InvalidOptionf("versionguard: %q: too many dots", name)
	}
	for i, p := range parts {
		if !identRe.MatchString(p) {
			return "", idem.InvalidOptionf("versionguard: %q is not a plain identifier", name)
		}
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, "."), nil
}

type built struct {
	write, current string
	writeArgs      []any
	keyArgs        []any
}

func build(d store.Dialect, s Spec, version int64) (built, error) {
	var b built
	if d != store.Postgres && d != store.SQLite {
		return b, idem.InvalidOptionf("versionguard: unknown dialect %q", d)
	}
	table, err := quote(s.Table)
	if err != nil {
		return b, err
	}
	if len(s.KeyColumns) == 0 || len(s.KeyColumns) != len(s.KeyValues) {
		return b, idem.InvalidOptionf("versionguard: %d key columns, %d key values", len(s.KeyColumns), len(s.KeyValues))
	}
	vc, err := quote(cmpOr(s.VersionColumn, "version"))
	if err != nil {
		return b, err
	}
	keys := make([]string, len(s.KeyColumns))
	for i, k := range s.KeyColumns {
		if keys[i], err = quote(k); err != nil {
			return b, err
		}
	}
	setNames := make([]string, 0, len(s.Set))
	for c := range s.Set {
		setNames = append(setNames, c)
	}
	slices.Sort(setNames) // deterministic SQL text
	set := make([]string, len(setNames))
	for i, c := range setNames {
		if set[i], err = quote(c); err != nil {
			return b, err
		}
	}

	var where []string
	for i, k := range keys {
		where = append(where, fmt.Sprintf("%s = $%d", k, i+1))
	}
	b.keyArgs = slices.Clone(s.KeyValues)
	b.current = `SELECT ` + vc + ` FROM ` + table + ` WHERE ` + strings.Join(where, " AND ")

	if !s.Upsert {
		// $1..$k keys, then the set values, then the version.
		args := slices.Clone(s.KeyValues)
		var assign []string
		for i, c := range set {
			args = append(args, s.Set[setNames[i]])
			assign = append(assign, fmt.Sprintf("%s = $%d", c, len(args)))
		}
		args = append(args, version)
		v := fmt.Sprintf("$%d", len(args))
		assign = append(assign, vc+" = "+v)
		b.write = `UPDATE ` + table + ` SET ` + strings.Join(assign, ", ") +
			` WHERE ` + strings.Join(where, " AND ") + ` AND ` + vc + ` < ` + v
		b.writeArgs = args
		return b, nil
	}
	cols := append(slices.Clone(keys), set...)
	cols = append(cols, vc)
	args := slices.Clone(s.KeyValues)
	for _, c := range setNames {
		args = append(args, s.Set[c])
	}
	args = append(args, version)
	ph := make([]string, len(args))
	for i := range args {
		ph[i] = fmt.Sprintf("$%d", i+1)
	}
	var assign []string
	for _, c := range append(slices.Clone(set), vc) {
		assign = append(assign, c+" = excluded."+c)
	}
	b.write = `INSERT INTO ` + table + ` AS cur (` + strings.Join(cols, ", ") + `) VALUES (` + strings.Join(ph, ", ") +
		`) ON CONFLICT (` + strings.Join(keys, ", ") + `) DO UPDATE SET ` + strings.Join(assign, ", ") +
		` WHERE cur.` + vc + ` < excluded.` + vc
	b.writeArgs = args
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
// applied or stale. Identifiers are validated and quoted; values are bound
// parameters. On a retry or a redelivery of the same version the result is
// Stale and nothing changes.
func Apply(ctx context.Context, q store.Querier, dialect store.Dialect, spec Spec, version int64) (Result, error) {
	b, err := build(dialect, spec, version)
	if err != nil {
		return Result{}, err
	}
	n, err := q.Exec(ctx, b.write, b.writeArgs...)
	if err != nil {
		return Result{}, fmt.Errorf("versionguard: %s: %w", spec.Table, err)
	}
	if n > 0 {
		return Result{Applied: true}, nil
	}
	var cur int64
	err = q.QueryRow(ctx, b.current, b.keyArgs...).Scan(&cur)
	switch {
	case errors.Is(err, store.ErrNoRows):
		return Result{Missing: true}, nil
	case err != nil:
		return Result{}, fmt.Errorf("versionguard: %s: read version: %w", spec.Table, err)
	}
	return Result{Stale: true, Current: cur}, nil
}

// ApplyTx is Apply inside the caller's transaction tx of driver d.
func ApplyTx[TTx any](ctx context.Context, d store.Driver[TTx], tx TTx, spec Spec, version int64) (Result, error) {
	return Apply(ctx, d.Tx(tx), d.Dialect(), spec, version)
}

// Guard is Apply with an observer, e.g. metrics counting stale writes
// (idemmetrics.Metrics.ObserveVersionGuard). The zero Guard works.
type Guard struct {
	// Observe, if set, is called after every successful Apply with the table
	// and the result.
	Observe func(table string, r Result)
}

// Apply is [Apply] followed by g.Observe.
func (g Guard) Apply(ctx context.Context, q store.Querier, dialect store.Dialect, spec Spec, version int64) (Result, error) {
	r, err := Apply(ctx, q, dialect, spec, version)
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
