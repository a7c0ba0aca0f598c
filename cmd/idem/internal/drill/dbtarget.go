package drill

// This file holds what the drill needs of its --db target: checking it,
// and a fresh, isolated database for each scenario.

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/boxoffice"
	"github.com/idemkit/idem/internal/dsn"
)

// ValidDatabaseURL reports whether raw is a --db URL the drill runs on.
func ValidDatabaseURL(raw string) bool {
	_, err := dsn.ParsePostgres(raw)
	return err == nil
}

// checkDatabase makes sure the server of the --db URL raw accepts a
// connection.
func checkDatabase(ctx context.Context, raw string) error { return checkPostgres(ctx, raw) }

// scenarioDB gives the scenario o a fresh database on the --db server (a
// new PostgreSQL schema): it sets o.DatabaseURL and o.Schema and returns
// the cleanup that drops it.
func (r *runner) scenarioDB(ctx context.Context, o *boxoffice.Options) (func(), error) {
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
