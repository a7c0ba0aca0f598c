package bench

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"

	"github.com/idemkit/idem/cmd/idem/internal/dsn"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql"
)

// openMySQL creates the run's MySQL database bench_<run id> on the server
// of cfg.MySQL (dropped at Close), opens a driver on it and migrates it.
func (e *Env) openMySQL(ctx context.Context) error {
	e.myDatabase = "bench_" + e.runID // generated here, never input
	if err := e.myExec(ctx, "CREATE DATABASE "+e.myDatabase+" CHARACTER SET utf8mb4"); err != nil {
		return fmt.Errorf("bench: create MySQL database: %w", err)
	}
	e.closers = append(e.closers, e.dropMySQLDatabase)
	conn, err := withDatabase(e.cfg.MySQL, e.myDatabase)
	if err != nil {
		return err
	}
	e.my, err = dsn.OpenMySQL(ctx, dsn.Database{Dialect: idemmysql.Dialect, Conn: conn}, dsn.Options{MaxConns: 24})
	if err != nil {
		return err
	}
	e.closers = append(e.closers, e.my.Close)
	if _, err := migrate.New(e.my).Up(ctx); err != nil {
		return fmt.Errorf("bench: migrate mysql: %w", err)
	}
	return nil
}

// withDatabase returns the mysql:// URL u naming database name instead.
func withDatabase(u, name string) (string, error) {
	db, err := dsn.ParseDatabase(u)
	if err != nil {
		return "", err
	}
	if db.Dialect != idemmysql.Dialect {
		return "", fmt.Errorf("bench: %s is not a mysql:// URL", db)
	}
	p, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	p.Path = "/" + name
	return p.String(), nil
}

// myExec runs statements on the server of cfg.MySQL, on a connection of
// their own that selects no database (the URL's database need not exist).
func (e *Env) myExec(ctx context.Context, stmts ...string) error {
	d, err := idemmysql.ServerDSN(e.cfg.MySQL)
	if err != nil {
		return err
	}
	db, err := sql.Open("mysql", d)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("bench: MySQL: %w", err)
		}
	}
	return nil
}

func (e *Env) dropMySQLDatabase() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return e.myExec(ctx, "DROP DATABASE IF EXISTS "+e.myDatabase)
}

// hasMySQL reports whether the MySQL variants run.
func (e *Env) hasMySQL() bool { return e.my != nil }

// mysqlNS is sqliteNS for MySQL: the run's database, idem's tables with a
// fresh prefix, migrated.
func (e *Env) mysqlNS(ctx context.Context) (store.Driver[*sql.Tx], error) {
	d, err := idemmysql.New(ctx, e.my.DB(), idemmysql.Config{Names: store.Names{Prefix: e.name("ns") + "_"}})
	if err != nil {
		return nil, err
	}
	return d, migrate.Up(ctx, d)
}

// mysqlPairs are the pairs that run on MySQL, named *_mysql: the
// store-level inbox pairs, the HTTP pairs and the outbox relay (marking
// and deleting).
func mysqlPairs(e *Env) []Pair {
	var ps []Pair
	for _, w := range []int{1, 8} {
		ps = append(ps, inboxVsPlain(e, e.my, "mysql", w))
	}
	for _, bh := range []bool{false, true} {
		ps = append(ps, inboxBatchVsSingle(e, e.my, "mysql", bh, 1))
	}
	ps = append(ps, httpPairs(e, e.my, "mysql", httpClients)...)
	return append(ps, outboxRelay(e, e.mysqlNS, "mysql"), outboxRelayDeleteVsMark(e, e.mysqlNS, "mysql"))
}
