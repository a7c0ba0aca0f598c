package drill

// This file holds what the drill needs of its --db target: checking it,
// and a fresh, isolated database for each scenario.

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"

	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/cmd/idem/internal/dsn"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql"
)

// ValidDatabaseURL reports whether raw is a --db URL the drill runs on:
// postgres://… or mysql://user:pass@host:3306/db.
func ValidDatabaseURL(raw string) bool {
	db, err := dsn.ParseDatabase(raw)
	return err == nil && (db.Dialect == store.Postgres || db.Dialect == idemmysql.Dialect)
}

// isMySQLURL reports whether raw is a mysql:// URL.
func isMySQLURL(raw string) bool {
	db, err := dsn.ParseDatabase(raw)
	return err == nil && db.Dialect == idemmysql.Dialect
}

// checkDatabase makes sure the server of the --db URL raw accepts a
// connection.
func checkDatabase(ctx context.Context, raw string) error {
	if isMySQLURL(raw) {
		return checkMySQL(ctx, raw)
	}
	return checkPostgres(ctx, raw)
}

// checkMySQL connects to the MySQL server of raw and closes again.
func checkMySQL(ctx context.Context, raw string) error {
	shown := redact.URL(raw)
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	db, err := mysqlAdmin(raw)
	if err != nil {
		return targetErrorf(raw, nil, "drill: --db %s is not a valid MySQL URL", shown)
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return targetErrorf(raw, err, "drill: --db %s: cannot connect to MySQL", shown)
	}
	return nil
}

// mysqlAdmin opens the server of the --db MySQL URL for the drill's own
// statements (CREATE and DROP DATABASE); the URL's database need not
// exist.
func mysqlAdmin(raw string) (*sql.DB, error) {
	d, err := idemmysql.ServerDSN(raw)
	if err != nil {
		return nil, err
	}
	return sql.Open("mysql", d)
}

// scenarioDB gives the scenario o a fresh database on the --db server (a
// new PostgreSQL schema, or a new MySQL database): it sets o.DatabaseURL
// and o.Schema and returns the cleanup that drops it.
func (r *runner) scenarioDB(ctx context.Context, o *boxoffice.Options) (func(), error) {
	if isMySQLURL(r.cfg.DatabaseURL) {
		return r.mysqlDatabase(ctx, o)
	}
	conn, schema, err := r.pgSchema(ctx)
	if err != nil {
		return nil, err
	}
	o.DatabaseURL, o.Schema = conn, schema
	return func() { r.dropSchema(schema) }, nil
}

// pgSchema creates a fresh schema and returns a URL whose search_path
// points at it.
func (r *runner) pgSchema(ctx context.Context) (string, string, error) {
	schema := "idem_drill_" + randHex(5)
	if err := r.pgExec(ctx, `CREATE SCHEMA `+schema); err != nil {
		return "", "", fmt.Errorf("drill: create schema: %w", err)
	}
	return dsn.WithParam(r.cfg.DatabaseURL, "search_path", schema), schema, nil
}

// pgExec runs one statement on the drill's PostgreSQL server, on a
// connection of its own.
func (r *runner) pgExec(ctx context.Context, stmt string) error {
	db, err := dsn.ParsePostgres(r.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	d, err := dsn.OpenPgx(ctx, db, dsn.Options{MaxConns: 1})
	if err != nil {
		return fmt.Errorf("drill: connect PostgreSQL: %w", err)
	}
	defer d.Close()
	_, err = d.Pool().Exec(ctx, stmt)
	return err
}

func (r *runner) dropSchema(schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = r.pgExec(ctx, `DROP SCHEMA `+schema+` CASCADE`)
}

// mysqlDatabase creates a fresh database on the drill's MySQL server and
// points o at it: on MySQL idem's tables and the boxoffice's live in the
// URL's database (there is no schema to pass to the children).
func (r *runner) mysqlDatabase(ctx context.Context, o *boxoffice.Options) (func(), error) {
	name := "idem_drill_" + randHex(5) // generated here, never input
	db, err := mysqlAdmin(r.cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4"); err != nil {
		return nil, fmt.Errorf("drill: create database: %w", err)
	}
	u, err := url.Parse(r.cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	u.Path = "/" + name
	o.DatabaseURL, o.Schema = u.String(), ""
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if db, err := mysqlAdmin(r.cfg.DatabaseURL); err == nil {
			_, _ = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
			db.Close()
		}
	}, nil
}
