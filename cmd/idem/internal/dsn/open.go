package dsn

import (
	"context"
	"database/sql"
	"net/url"
	"strconv"
	"strings"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql"
	"github.com/idemkit/idem/store/pgxstore"
	"github.com/idemkit/idem/store/sqlstore"

	_ "modernc.org/sqlite" // the SQLite database/sql driver (the core module links none)
)

// Options configures the openers.
type Options struct {
	// Names is where idem's tables live: the PostgreSQL schema (a
	// search_path in the URL does not change it) or the SQLite prefix.
	// Defaults to schema "idem" / prefix "idem_".
	Names store.Names
	// MaxConns caps the PostgreSQL pool unless the URL sets
	// pool_max_conns (pgx) — database/sql gets it as MaxOpenConns and
	// MaxIdleConns. 0 leaves the driver's default. SQLite's cap is
	// SQLite.MaxOpenConns.
	MaxConns int
	// SQLite are the SQLite file's options (synchronous level, busy
	// timeout, pool cap, MustExist).
	SQLite sqlstore.SQLiteConfig
}

// Open opens s with the driver idem's tools run on for its dialect: pgx
// (store/pgxstore) for PostgreSQL, database/sql on modernc.org/sqlite
// (store/sqlstore) for SQLite, database/sql on go-sql-driver (store/mysql)
// for MySQL and MariaDB. The driver's transaction type is erased
// (pgx.Tx or *sql.Tx behind any), so one caller serves both; every method
// and ability is forwarded. Close releases the connections.
func Open(ctx context.Context, s string, opts Options) (store.Driver[any], error) {
	db, err := ParseDatabase(s)
	if err != nil {
		return nil, err
	}
	return OpenDatabase(ctx, db, opts)
}

// OpenDatabase is [Open] for a parsed URL.
func OpenDatabase(ctx context.Context, db Database, opts Options) (store.Driver[any], error) {
	if db.Dialect == idemmysql.Dialect {
		d, err := OpenMySQL(ctx, db, opts)
		if err != nil {
			return nil, err
		}
		return Erase(d), nil
	}
	if db.Dialect == store.Postgres {
		d, err := OpenPgx(ctx, db, opts)
		if err != nil {
			return nil, err
		}
		return Erase(d), nil
	}
	d, err := OpenSQL(ctx, db, opts)
	if err != nil {
		return nil, err
	}
	return Erase(d), nil
}

// OpenPgx opens a PostgreSQL database through pgx (a pool the driver owns).
func OpenPgx(ctx context.Context, db Database, opts Options) (*pgxstore.Driver, error) {
	if db.Dialect != store.Postgres {
		return nil, refuse("database", "sqlite", ErrUnsupported, "database URL scheme \"sqlite\" is not supported here: want postgres://…")
	}
	conn := db.Conn
	if opts.MaxConns > 0 && !strings.Contains(conn, "pool_max_conns") {
		conn = WithParam(conn, "pool_max_conns", strconv.Itoa(opts.MaxConns))
	}
	return pgxstore.Open(ctx, conn, pgxstore.Config{Names: withLayout(opts.Names, db)})
}

// OpenSQL opens the database through database/sql: SQLite, or PostgreSQL
// through pgx's stdlib adapter (the operator commands' driver). A missing
// SQLite file with opts.SQLite.MustExist is an error wrapping
// fs.ErrNotExist.
func OpenSQL(ctx context.Context, db Database, opts Options) (*sqlstore.Driver, error) {
	if db.Dialect == store.Postgres {
		d, err := sqlstore.OpenPostgres(ctx, db.Conn, sqlstore.Config{Names: withLayout(opts.Names, db)})
		if err != nil {
			return nil, err
		}
		if opts.MaxConns > 0 {
			d.DB().SetMaxOpenConns(opts.MaxConns)
			d.DB().SetMaxIdleConns(opts.MaxConns)
		}
		return d, nil
	}
	return sqlstore.OpenSQLite(db.Path, opts.SQLite, sqlstore.Config{Names: opts.Names})
}

// OpenMySQL opens a MySQL or MariaDB database through database/sql and
// go-sql-driver (store/mysql; a pool the driver owns).
func OpenMySQL(ctx context.Context, db Database, opts Options) (*idemmysql.Driver, error) {
	if db.Dialect != idemmysql.Dialect {
		return nil, refuse("database", string(db.Dialect), ErrUnsupported, "database URL scheme %q is not supported here: want mysql://…", db.Dialect)
	}
	d, err := idemmysql.Open(ctx, db.Conn, idemmysql.Config{Names: opts.Names})
	if err != nil {
		return nil, err
	}
	if opts.MaxConns > 0 {
		d.DB().SetMaxOpenConns(opts.MaxConns)
		d.DB().SetMaxIdleConns(opts.MaxConns)
	}
	return d, nil
}

// OpenSQLDriver is [OpenSQL] for every dialect the operator commands run
// on through database/sql: SQLite, PostgreSQL (pgx stdlib) and MySQL.
func OpenSQLDriver(ctx context.Context, db Database, opts Options) (store.Driver[*sql.Tx], error) {
	if db.Dialect == idemmysql.Dialect {
		return OpenMySQL(ctx, db, opts)
	}
	return OpenSQL(ctx, db, opts)
}

// WithParam returns the URL u with the query parameter key set to value
// (replacing any value u had for key; the other parameters are kept).
func WithParam(u, key, value string) string {
	if p, err := url.Parse(u); err == nil {
		q := p.Query()
		q.Set(key, value)
		p.RawQuery = q.Encode()
		return p.String()
	}
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + url.QueryEscape(key) + "=" + url.QueryEscape(value)
}

// withLayout is n with the URL's layout (Database.Layout) unless n names
// one itself.
func withLayout(n store.Names, db Database) store.Names {
	if n.Layout == store.LayoutPlain {
		n.Layout = db.Layout
	}
	return n
}
