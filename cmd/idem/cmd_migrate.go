package main

import (
	"context"
	"fmt"

	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/migrate"
)

// runMigrate implements "idem migrate up|status [--db URL]" (flags before
// or after the action). It first names the database it acts on (redacted),
// so a wrong --db is seen at once. "up" creates a missing SQLite database;
// "status" only reads and fails on a missing one.
func runMigrate(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "migrate", "up|status [--db URL]")
	dbURL := fs.String("db", "", "database URL (postgres://… or sqlite://path); default $IDEM_DATABASE_URL or "+defaultDatabaseURL)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	action := "up"
	if fs.NArg() > 0 {
		action = fs.Arg(0)
	}
	if action != "up" && action != "status" {
		return fmt.Errorf("%w: unknown action %q (want up or status)", errUsage, action)
	}
	if fs.NArg() > 1 {
		return fmt.Errorf("%w: unexpected argument %q after %s", errUsage, fs.Arg(1), action)
	}
	u := databaseURL(env, *dbURL)
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
