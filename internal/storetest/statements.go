package storetest

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// Statement is one statement of a [sqlset.Set], as [Walk] finds it.
type Statement struct {
	// Field is the statement's place in the Set: "Inbox.Claim".
	Field string
	// N is the arity a func(n int) string field was called with; 0 for a
	// plain string field.
	N int
	// Variant names one statement of a field that builds several (see
	// [Builders]): "upsert.Write".
	Variant string
	// SQL is the statement's text; "" when the dialect does not need it.
	SQL string
	// Other is set for a field that is not SQL (migration files, a
	// placeholder expander), listed in [Builders] with how it is checked;
	// SQL is then empty and the suite does not prepare it.
	Other bool
}

// Name is Field, with the arity for a func field ("Outbox.Insert(3)") or
// the variant for a built one ("Meta.VersionGuard[upsert.Write]").
func (s Statement) Name() string {
	switch {
	case s.Variant != "":
		return fmt.Sprintf("%s[%s]", s.Field, s.Variant)
	case s.N != 0:
		return fmt.Sprintf("%s(%d)", s.Field, s.N)
	}
	return s.Field
}

// Builder is how the suite reads a Set field that is neither a string
// nor a func(n int) string.
type Builder struct {
	// Reason says what the field is and how it is checked.
	Reason string
	// Build returns the statements the field stands for (nil for a field
	// that holds no SQL; the suite then only checks it is set).
	Build func(v reflect.Value) ([]Statement, error)
	// Setup are statements creating what the built statements need (a
	// caller's table), run before they are prepared.
	Setup []string
}

// Builders lists, by field, the Set fields that are not plain statements.
// A field of another type that is not listed here fails [Walk], so a new
// kind of field cannot go unchecked.
var Builders = map[string]Builder{
	"Partitions": {
		Reason: "the partitioned layout's script and calls of the functions only its conversion creates: package retention's partition tests convert a PostgreSQL store and run each of them",
	},
	"Meta.Migrations": {
		Reason: "the dialect's migration files: migrate.Up applies them to every database the suite prepares on, which is their test",
	},
	"Meta.Expand": {
		Reason: "fills the placeholders of a migration file: exercised by migrate.Up with Meta.Migrations",
	},
	"Meta.VersionGuard": {
		Reason: "builds the statements of a version-guarded write to a caller's table: built for a sample table (two key columns) with and without Upsert, and prepared",
		Setup: []string{`CREATE TABLE IF NOT EXISTS conf_versioned (
			tenant varchar(64) NOT NULL, id varchar(64) NOT NULL, name text, seats bigint, version bigint NOT NULL,
			PRIMARY KEY (tenant, id))`},
		Build: func(v reflect.Value) ([]Statement, error) {
			build, ok := v.Interface().(func(sqlset.VersionedWrite) sqlset.VersionedSQL)
			if !ok {
				return nil, fmt.Errorf("is a %s, not a func(sqlset.VersionedWrite) sqlset.VersionedSQL", v.Type())
			}
			var out []Statement
			for _, upsert := range []bool{false, true} {
				w := sqlset.VersionedWrite{Table: "conf_versioned", Keys: []string{"tenant", "id"}, Set: []string{"name", "seats"}, Version: "version", Upsert: upsert}
				q := build(w)
				mode := map[bool]string{false: "update", true: "upsert"}[upsert]
				out = append(out,
					Statement{Variant: mode + ".Write", SQL: q.Write},
					Statement{Variant: mode + ".Current", SQL: q.Current})
			}
			return out, nil
		},
	},
}

// Arities are the n every func(n int) string field of a Set is called with.
var Arities = []int{1, 3}

var arityFunc = reflect.TypeFor[func(int) string]()

// Walk returns every statement of s, walking every field of every nested
// struct by reflection: a string field is one statement, a func(n int)
// string field one statement per n in [Arities] (a nil func reads as "").
// A field of any other type is an error, so a new kind of field cannot go
// unchecked. Empty statements are included.
func Walk(s *sqlset.Set) ([]Statement, error) {
	var out []Statement
	err := walk(reflect.ValueOf(s).Elem(), "", &out)
	return out, err
}

func walk(v reflect.Value, prefix string, out *[]Statement) error {
	typ := v.Type()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := f.Name
		if prefix != "" {
			name = prefix + "." + f.Name
		}
		if !f.IsExported() {
			return fmt.Errorf("storetest: %s.%s is unexported: a Set holds exported statements only", typ, f.Name)
		}
		fv := v.Field(i)
		if name == "NotNeeded" || name == "Limits" {
			continue // the dialect's list of empty statements (read by Complete), and its column limits
		}
		if b, ok := Builders[name]; ok {
			if err := walkBuilt(fv, name, b, out); err != nil {
				return err
			}
			continue
		}
		switch {
		case f.Type.Kind() == reflect.String:
			*out = append(*out, Statement{Field: name, SQL: fv.String()})
		case f.Type.Kind() == reflect.Struct:
			if err := walk(fv, name, out); err != nil {
				return err
			}
		case f.Type == arityFunc || f.Type.ConvertibleTo(arityFunc) && f.Type.Kind() == reflect.Func:
			for _, n := range Arities {
				sql, err := call(fv, n)
				if err != nil {
					return fmt.Errorf("storetest: %s(%d): %w", name, n, err)
				}
				*out = append(*out, Statement{Field: name, N: n, SQL: sql})
			}
		default:
			return fmt.Errorf("storetest: %s has type %s: a Set field is a string, a func(n int) string or a struct of them, or is listed in storetest.Builders with how to check it", name, f.Type)
		}
	}
	return nil
}

func walkBuilt(fv reflect.Value, name string, b Builder, out *[]Statement) error {
	switch fv.Kind() {
	case reflect.Func, reflect.Interface, reflect.Pointer, reflect.Map, reflect.Slice:
		if fv.IsNil() {
			*out = append(*out, Statement{Field: name}) // unset: Complete reports it
			return nil
		}
	}
	if b.Build == nil {
		*out = append(*out, Statement{Field: name, Other: true})
		return nil
	}
	var built []Statement
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panicked: %v", p)
			}
		}()
		built, err = b.Build(fv)
		return err
	}()
	if err != nil {
		return fmt.Errorf("storetest: %s: %w", name, err)
	}
	for _, st := range built {
		st.Field = name
		*out = append(*out, st)
	}
	return nil
}

func call(fv reflect.Value, n int) (sql string, err error) {
	if fv.IsNil() {
		return "", nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panicked: %v", p)
		}
	}()
	return fv.Convert(arityFunc).Interface().(func(int) string)(n), nil
}

// RunInTx is a statement the suite runs in a transaction (rolled back)
// instead of preparing it alone, because it holds several statements or
// means nothing outside its context. Every entry of [InTx] says why.
type RunInTx struct {
	// Reason is why the statement cannot be prepared on its own.
	Reason string
	// Before names the fields of the same Set whose statements run first
	// in the transaction (e.g. "Inbox.Savepoint", the SAVEPOINT a
	// RELEASE refers to), so one entry serves every dialect.
	Before []string
	// Args are bound to the statement.
	Args []any
}

// InTx lists, by field ("Inbox.Release"; for a func field its name without
// arity), the statements run in a transaction instead of prepared: they
// hold several statements ("RELEASE SAVEPOINT x; SAVEPOINT x", which no
// driver prepares as one) or only mean something inside a transaction
// (SET LOCAL). The list is the same for every dialect; an entry whose
// statement a dialect leaves empty is not run there. A multi-statement text
// that is not listed fails the suite: it must be listed, never skipped.
var InTx = map[string]RunInTx{
	"Inbox.BatchSavepointRollback": {
		Reason: "two statements in one round trip (ROLLBACK TO SAVEPOINT; RELEASE SAVEPOINT), only valid after the batch's savepoint",
		Before: []string{"Inbox.BatchSavepoint"},
	},
	"Inbox.SavepointNext": {
		Reason: "two statements in one round trip (RELEASE SAVEPOINT; SAVEPOINT), only valid after the message's savepoint",
		Before: []string{"Inbox.Savepoint"},
	},
}

// Scripted lists, with the reason, the dialects whose driver runs a
// statement text of several statements itself, in order on one
// transaction: their texts are not listed in [InTx], and the suite hands
// each whole text to the driver's Prepare, which prepares every statement
// of it.
var Scripted = map[store.Dialect]string{
	"mysql": "MySQL has no RETURNING and MariaDB no UPDATE … RETURNING: a statement that returns the rows it wrote elsewhere is a script there (store/mysql)",
}

// Complete checks that s, dialect's Set, has a statement in every field
// but those its NotNeeded lists, and that every NotNeeded and
// [InTx] entry names an existing field.
func Complete(t *testing.T, dialect store.Dialect, s *sqlset.Set) {
	t.Helper()
	stmts, err := Walk(s)
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]bool{}
	filled := map[string]bool{}
	for _, st := range stmts {
		fields[st.Field] = true
		if st.SQL != "" {
			filled[st.Field] = true
		}
	}
	notNeeded := s.NotNeeded
	for _, st := range stmts {
		if st.Other {
			continue // set; checked as its Builders entry says
		}
		reason, listed := notNeeded[st.Field]
		switch {
		case st.SQL == "" && !listed:
			t.Errorf("%s: %s has no statement: write it in store/%s, or list it in the Set's NotNeeded with the reason the dialect does not need it",
				dialect, st.Name(), dialect)
		case st.SQL != "" && listed:
			t.Errorf("%s: %s has a statement but the Set's NotNeeded says it is not needed (%q): remove the entry", dialect, st.Name(), reason)
		case st.SQL == "" && filled[st.Field]:
			t.Errorf("%s: %s is empty although other statements of %s are not", dialect, st.Name(), st.Field)
		}
	}
	for _, f := range sortedKeys(notNeeded) {
		if !fields[f] {
			t.Errorf("%s: NotNeeded names %s, which is no field of sqlset.Set", dialect, f)
		}
		if strings.TrimSpace(notNeeded[f]) == "" {
			t.Errorf("storetest.NotNeeded[%q][%s] gives no reason", dialect, f)
		}
	}
	for _, f := range sortedKeys(Builders) {
		if !fields[f] {
			t.Errorf("storetest.Builders names %s, which is no field of sqlset.Set", f)
		}
	}
	for _, f := range sortedKeys(InTx) {
		if !fields[f] {
			t.Errorf("storetest.InTx names %s, which is no field of sqlset.Set", f)
		}
		if strings.TrimSpace(InTx[f].Reason) == "" {
			t.Errorf("storetest.InTx[%s] gives no reason", f)
		}
		for _, b := range InTx[f].Before {
			if !fields[b] {
				t.Errorf("storetest.InTx[%s].Before names %s, which is no field of sqlset.Set", f, b)
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Prepare checks one statement in the driver's own way without running it:
// the database parses it and resolves every table and column it names
// (pgx: Conn.Prepare; database/sql: PrepareContext).
type Prepare func(ctx context.Context, sql string) error

// Statements prepares every statement of d.Statements() with prepare, on
// d's migrated database, and reports each one that fails with its field
// and the error; the statements listed in [InTx] are run in a rolled-back
// transaction instead. Empty statements (not needed by the dialect) are
// left to [Complete].
func Statements[TTx any](t *testing.T, d store.Driver[TTx], prepare Prepare) {
	t.Helper()
	stmts, err := Walk(d.Statements())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, f := range sortedKeys(Builders) {
		for _, sql := range Builders[f].Setup {
			if _, err := d.Pool().Exec(ctx, sql); err != nil {
				t.Fatalf("setup for %s: %v", f, err)
			}
		}
	}
	byField := map[string]string{}
	for _, st := range stmts {
		if st.N == 0 && st.Variant == "" {
			byField[st.Field] = st.SQL
		}
	}
	checked := 0
	for _, st := range stmts {
		if st.SQL == "" || st.Other {
			continue
		}
		checked++
		if c, ok := InTx[st.Field]; ok {
			if err := runInTx(ctx, d, c, byField, st.SQL); err != nil {
				t.Errorf("%s (%s: run in a transaction because %s): %v\n%s", st.Name(), d.Dialect(), c.Reason, err, st.SQL)
			}
			continue
		}
		if parts := Split(st.SQL); len(parts) > 1 && Scripted[d.Dialect()] == "" {
			t.Errorf("%s (%s) holds %d statements, which no driver prepares as one: list it in storetest.InTx with the reason\n%s",
				st.Name(), d.Dialect(), len(parts), st.SQL)
			continue
		}
		if err := prepare(ctx, st.SQL); err != nil {
			t.Errorf("%s (%s) does not prepare: %v\n%s", st.Name(), d.Dialect(), err, st.SQL)
		}
	}
	t.Logf("%s: %d statements of %d fields checked", d.Dialect(), checked, len(stmts))
}

func runInTx[TTx any](ctx context.Context, d store.Driver[TTx], c RunInTx, byField map[string]string, sql string) error {
	tx, err := d.Begin(ctx)
	if err != nil {
		return err
	}
	defer d.Rollback(context.WithoutCancel(ctx), tx)
	q := d.Tx(tx)
	for _, f := range c.Before {
		b, ok := byField[f]
		if !ok || b == "" {
			return fmt.Errorf("before: %s has no statement in this dialect", f)
		}
		if _, err := q.Exec(ctx, b); err != nil {
			return fmt.Errorf("before: %s: %w", f, err)
		}
	}
	_, err = q.Exec(ctx, sql, c.Args...)
	return err
}

// Split cuts sql into its statements at the semicolons outside quotes
// ('…', "…", PostgreSQL $tag$…$tag$) and comments (-- …, /* … */),
// dropping empty ones: a single statement, with or without its final
// semicolon, is one part.
func Split(sql string) []string {
	var parts []string
	start := 0
	add := func(end int) {
		if p := strings.TrimSpace(sql[start:end]); p != "" && !onlyComments(p) {
			parts = append(parts, p)
		}
	}
	for i := 0; i < len(sql); i++ {
		switch c := sql[i]; {
		case c == '\'' || c == '"':
			j := strings.IndexByte(sql[i+1:], c)
			if j < 0 {
				i = len(sql)
			} else {
				i += j + 1
			}
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				i = len(sql)
			} else {
				i += j
			}
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			j := strings.Index(sql[i+2:], "*/")
			if j < 0 {
				i = len(sql)
			} else {
				i += j + 3
			}
		case c == '$':
			if tag, ok := dollarTag(sql[i:]); ok {
				j := strings.Index(sql[i+len(tag):], tag)
				if j < 0 {
					i = len(sql)
				} else {
					i += len(tag) + j + len(tag) - 1
				}
			}
		case c == ';':
			add(i)
			start = i + 1
		}
	}
	if start < len(sql) {
		add(len(sql))
	}
	return parts
}

// dollarTag returns the opening $tag$ at the start of s ($1 is a
// placeholder, not a tag).
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '$':
			return s[:j+1], true
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || j > 1 && '0' <= c && c <= '9':
		default:
			return "", false
		}
	}
	return "", false
}

func onlyComments(s string) bool {
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		switch {
		case strings.HasPrefix(s, "--"):
			j := strings.IndexByte(s, '\n')
			if j < 0 {
				return true
			}
			s = s[j+1:]
		case strings.HasPrefix(s, "/*"):
			j := strings.Index(s, "*/")
			if j < 0 {
				return true
			}
			s = s[j+2:]
		default:
			return false
		}
	}
	return true
}

var placeholderRe = regexp.MustCompile(`\$([0-9]+)`)

// maxPlaceholder is the highest $n in sql (0 for none).
func maxPlaceholder(sql string) int {
	most := 0
	for _, m := range placeholderRe.FindAllStringSubmatch(sql, -1) {
		if n, err := strconv.Atoi(m[1]); err == nil && n > most {
			most = n
		}
	}
	return most
}

// SameArguments checks that the statements of other (a lenient dialect,
// such as SQLite, which ignores arguments a statement does not name) never
// name an argument beyond the last one strict's statement of the same
// field names: feature code binds one argument list for every dialect, and
// a strict dialect (PostgreSQL: exactly one argument per parameter)
// decides its length.
func SameArguments(t *testing.T, strict, other *sqlset.Set) {
	t.Helper()
	a, err := Walk(strict)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Walk(other)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{}
	for _, st := range a {
		byName[st.Name()] = st.SQL
	}
	for _, st := range b {
		s, ok := byName[st.Name()]
		if !ok || s == "" || st.SQL == "" {
			continue
		}
		if ms, mo := maxPlaceholder(s), maxPlaceholder(st.SQL); mo > ms {
			t.Errorf("%s names $%d, but the strict dialect's statement stops at $%d, so its callers bind %d arguments", st.Name(), mo, ms, ms)
		}
	}
}
