package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/idemkit/idem/retention"
)

func runGC(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "gc", "[--db URL] [--once] [--batch N]")
	dbURL := fs.String("db", "", "database URL (postgres://… or sqlite://path); default $IDEM_DATABASE_URL or "+defaultDatabaseURL)
	once := fs.Bool("once", false, "run one pass and exit (default: a pass every --interval until interrupted)")
	batch := fs.Int("batch", 1000, "rows deleted per statement")
	interval := fs.Duration("interval", time.Minute, "pause between passes")
	outboxRet := fs.Duration("outbox-retention", 7*24*time.Hour, "keep published outbox events this long")
	dlqRet := fs.Duration("dlq-retention", 30*24*time.Hour, "keep redriven/discarded dead letters this long")
	asJSON := fs.Bool("json", false, "print each pass's report as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *batch <= 0 || *interval <= 0 || *outboxRet <= 0 || *dlqRet <= 0 {
		return fmt.Errorf("%w: --batch, --interval and retentions must be positive", errUsage)
	}
	d, err := openSQL(ctx, databaseURL(env, *dbURL))
	if err != nil {
		return err
	}
	defer d.Close()
	gc, err := retention.New(d, retention.Config{BatchSize: *batch, Interval: *interval, OutboxRetention: *outboxRet,
		DLQRetention: *dlqRet, Logger: slog.New(slog.NewTextHandler(env.Stderr, nil))})
	if err != nil {
		return err
	}
	for {
		rep, err := gc.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			if *once {
				return err
			}
			fmt.Fprintf(env.Stderr, "idem gc: %v\n", err)
		}
		if err == nil {
			if err := printGCReport(env, rep, *asJSON); err != nil {
				return err
			}
		}
		if *once {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*interval):
		}
	}
}

func printGCReport(env *Env, rep retention.Report, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(env.Stdout).Encode(rep)
	}
	fmt.Fprintf(env.Stdout, "deleted %d row(s) in %d batch(es) in %s", rep.Total(), rep.Batches, rep.Took.Round(time.Millisecond))
	for _, t := range []string{"inbox", "idempotency_keys", "outbox", "effects", "dead_letters"} {
		if n := rep.Deleted[t]; n > 0 {
			fmt.Fprintf(env.Stdout, " %s=%d", t, n)
		}
	}
	if len(rep.Skipped) > 0 {
		s := slices.Clone(rep.Skipped)
		fmt.Fprintf(env.Stdout, " (skipped missing tables: %v)", s)
	}
	fmt.Fprintln(env.Stdout)
	return nil
}
