package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"
)

// defaultDatabaseURL is the embedded default: an SQLite file under ./idem-data.
const defaultDatabaseURL = "sqlite://./idem-data/idem.db"

// databaseURL picks --db, then IDEM_DATABASE_URL, then the default.
func databaseURL(env *Env, flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := env.Getenv("IDEM_DATABASE_URL"); v != "" {
		return v
	}
	return defaultDatabaseURL
}

// dbTarget is a parsed database URL.
type dbTarget struct {
	Dialect store.Dialect
	// Conn is the PostgreSQL connection string or the SQLite file path.
	Conn string
}

// parseDatabaseURL accepts postgres://, postgresql:// and sqlite://path
// (sqlite:///abs/path for an absolute path).
func parseDatabaseURL(u string) (dbTarget, error) {
	switch {
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		return dbTarget{Dialect: store.Postgres, Conn: u}, nil
	case strings.HasPrefix(u, "sqlite://"):
		p := strings.TrimPrefix(u, "sqlite://")
		if i := strings.IndexByte(p, '?'); i >= 0 {
			p = p[:i]
		}
		if p == "" {
			return dbTarget{}, fmt.Errorf("%w: the sqlite:// database URL has no file path (want sqlite://path/to/file.db)", errUsage)
		}
		return dbTarget{Dialect: store.SQLite, Conn: filepath.Clean(p)}, nil
	}
	// Never echo u: it may carry a password.
	if sc := redact.Scheme(u); sc != "" {
		return dbTarget{}, fmt.Errorf("%w: database URL scheme %q is not supported: want postgres://… or sqlite://path", errUsage, sc)
	}
	return dbTarget{}, fmt.Errorf("%w: the database URL has no scheme: want postgres://… or sqlite://path", errUsage)
}

// mustExist is openSQL's create argument for the commands that must not
// create a database (all but "idem migrate up"): a mistyped SQLite path is
// an error, not a new empty database.
const mustExist = false

// openSQL opens the database at u through database/sql (SQLite, or
// PostgreSQL via pgx's stdlib) for the operator commands. Unless create is
// set, a missing SQLite file is an error ("no database at path") and
// nothing is created. Errors never carry u's credentials.
func openSQL(ctx context.Context, u string, create bool) (*sqlstore.Driver, error) {
	t, err := parseDatabaseURL(u)
	if err != nil {
		return nil, err
	}
	if t.Dialect == store.Postgres {
		d, err := sqlstore.OpenPostgres(ctx, t.Conn, sqlstore.Config{})
		return d, hideURL(err, u)
	}
	d, err := sqlstore.OpenSQLite(t.Conn, sqlstore.SQLiteOptions{MustExist: !create}, sqlstore.Config{})
	if errors.Is(err, sqlstore.ErrNoDatabase) {
		return nil, fmt.Errorf("no database at %s (check the path; 'idem migrate up' creates one)", t.Conn)
	}
	return d, err
}

// hideURL returns err with every occurrence of the raw URL u in its message
// replaced by its redacted form, keeping err in the chain for errors.Is.
// Drivers already redact their own messages; this makes sure of it.
func hideURL(err error, u string) error {
	if err == nil || u == "" || !strings.Contains(err.Error(), u) {
		return err
	}
	return redactedError{msg: strings.ReplaceAll(err.Error(), u, redact.URL(u)), err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e redactedError) Error() string { return e.msg }
func (e redactedError) Unwrap() error { return e.err }
