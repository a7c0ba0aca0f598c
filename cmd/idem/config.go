package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

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
			return dbTarget{}, fmt.Errorf("%w: database URL %q has no file path (want sqlite://path/to/file.db)", errUsage, u)
		}
		return dbTarget{Dialect: store.SQLite, Conn: filepath.Clean(p)}, nil
	}
	return dbTarget{}, fmt.Errorf("%w: database URL %q: want postgres://… or sqlite://path", errUsage, u)
}

// openSQL opens the database at u through database/sql (SQLite, or
// PostgreSQL via pgx's stdlib) for the operator commands.
func openSQL(ctx context.Context, u string) (*sqlstore.Driver, error) {
	t, err := parseDatabaseURL(u)
	if err != nil {
		return nil, err
	}
	if t.Dialect == store.Postgres {
		return sqlstore.OpenPostgres(ctx, t.Conn, sqlstore.Config{})
	}
	return sqlstore.OpenSQLite(t.Conn, sqlstore.SQLiteOptions{}, sqlstore.Config{})
}
