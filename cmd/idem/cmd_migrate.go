package main

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/cmd/idem/internal/dsn"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/retention"
	"github.com/idemkit/idem/store"
)

// runMigrate implements "idem migrate up|status|partition [--db URL]"
// (flags before or after the action). It first names the database it acts
// on (redacted), so a wrong --db is seen at once. "up" creates a missing
// SQLite database; "status" only reads and fails on a missing one;
// "partition" applies pending migrations and converts a PostgreSQL
// database's inbox, idempotency keys and effect ledger to the partitioned layout
// (retention.Partition), after which every process must open the database
// with ?idem_layout=partitioned.
func runMigrate(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "migrate", "up|status|partition [--db URL]")
	dbURL := fs.String("db", "", "database URL (postgres://…, mysql://… or sqlite://path); default $IDEM_DATABASE_URL or "+defaultDatabaseURL)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	action := "up"
	if fs.NArg() > 0 {
		action = fs.Arg(0)
	}
	if action != "up" && action != "status" && action != "partition" {
		return fmt.Errorf("%w: unknown action %q (want up, status or partition)", errUsage, action)
	}
	if fs.NArg() > 1 {
		return fmt.Errorf("%w: unexpected argument %q after %s", errUsage, fs.Arg(1), action)
	}
	if env.CheckOnly {
		return nil
	}
	u := databaseURL(env, *dbURL)
	if action == "partition" {
		return migratePartition(ctx, env, u)
	}
	d, err := openSQL(ctx, u, action == "up")
	if err != nil {
		return err
	}
	defer d.Close()
	fmt.Fprintf(env.Stdout, "database %s\n", redact.URL(u))
	m := migrate.New(d)
	if action == "up" {
		applied, err := m.Up(ctx)
		if err != nil {
			return err
		}
		for _, a := range applied {
			fmt.Fprintf(env.Stdout, "applied %04d_%s\n", a.Version, a.Name)
		}
		if len(applied) == 0 {
			fmt.Fprintln(env.Stdout, "database is up to date")
		}
		return nil
	}
	st, err := m.Status(ctx)
	if err != nil {
		return err
	}
	tw := newTable(env)
	fmt.Fprintln(tw, "VERSION\tNAME\tSTATE\tAPPLIED AT")
	for _, s := range st {
		state, at := "pending", ""
		if s.Applied {
			state, at = "applied", s.AppliedAt.Format("2006-01-02 15:04:05Z07:00")
		}
		fmt.Fprintf(tw, "%04d\t%s\t%s\t%s\n", s.Version, s.Name, state, at)
	}
	return tw.Flush()
}

// migratePartition is "idem migrate partition": pending migrations, then
// the conversion to the partitioned layout (one transaction; the inbox,
// idempotency keys, outbox and effects tables are locked while their rows
// are copied).
func migratePartition(ctx context.Context, env *Env, u string) error {
	t, err := parseDatabaseURL(u)
	if err != nil {
		return err
	}
	if t.Dialect != store.Postgres {
		return fmt.Errorf("%w: the partitioned layout is PostgreSQL's (SQLite and MySQL keep batch deletes): want --db postgres://…", errUsage)
	}
	if t.Layout != store.LayoutPartitioned {
		u = dsn.WithParam(u, dsn.LayoutParam, string(store.LayoutPartitioned))
	}
	d, err := openSQL(ctx, u, false)
	if err != nil {
		return err
	}
	defer d.Close()
	fmt.Fprintf(env.Stdout, "database %s\n", redact.URL(u))
	applied, err := migrate.New(d).Up(ctx)
	if err != nil {
		return err
	}
	for _, a := range applied {
		fmt.Fprintf(env.Stdout, "applied %04d_%s\n", a.Version, a.Name)
	}
	rep, err := retention.Partition(ctx, d, retention.PartitionConfig{}, time.Now())
	if err != nil {
		return hideURL(err, u)
	}
	fmt.Fprintf(env.Stdout, "partitioned layout: inbox, idempotency keys and effects range-partitioned by expires_at, the outbox by created_at (%d partitions created)\n", len(rep.Created))
	fmt.Fprintf(env.Stdout, "open the database with ?%s=%s in every process from now on (idem gc then drops expired partitions)\n", dsn.LayoutParam, store.LayoutPartitioned)
	return nil
}
