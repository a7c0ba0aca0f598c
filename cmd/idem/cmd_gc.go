package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/retention"
)

// runGC implements "idem gc": by default a loop that runs a pass every
// --interval until interrupted (it says so on start, on stderr); --once
// runs one pass and exits.
func runGC(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "gc", "[--db URL] [--once] [--interval 1m] [--batch N]\n\nWithout --once, gc runs a pass every --interval until interrupted (Ctrl-C or SIGTERM).")
	dbURL := fs.String("db", "", "database URL (postgres://…, mysql://… or sqlite://path); default $IDEM_DATABASE_URL or "+defaultDatabaseURL)
	once := fs.Bool("once", false, "run one pass and exit (default: a pass every --interval until interrupted)")
	batch := fs.Int("batch", 1000, "rows deleted per statement")
	interval := fs.Duration("interval", time.Minute, "pause between passes")
	outboxRet := fs.Duration("outbox-retention", 7*24*time.Hour, "keep published outbox events this long")
	dlqRet := fs.Duration("dlq-retention", 30*24*time.Hour, "keep redriven/discarded dead letters this long")
	sagaRet := fs.Duration("saga-retention", 30*24*time.Hour, "keep finished (completed or compensated) sagas and their steps this long")
	asJSON := fs.Bool("json", false, "print each pass's report as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *batch <= 0 || *interval <= 0 || *outboxRet <= 0 || *dlqRet <= 0 || *sagaRet <= 0 {
		return fmt.Errorf("%w: --batch, --interval and retentions must be positive", errUsage)
	}
	if env.CheckOnly {
		return nil
	}
	u := databaseURL(env, *dbURL)
	d, err := openSQL(ctx, u, mustExist)
	if err != nil {
		return err
	}
	defer d.Close()
	if !*once {
		fmt.Fprintf(env.Stderr, "idem gc: deleting expired records in %s every %s until interrupted (Ctrl-C or SIGTERM stops it; --once runs one pass)\n",
			redact.URL(u), *interval)
	}
	gc, err := retention.New(d, retention.Config{BatchSize: *batch, Interval: *interval, OutboxRetention: *outboxRet,
		DLQRetention: *dlqRet, SagaRetention: *sagaRet, Logger: slog.New(slog.NewTextHandler(env.Stderr, nil))})
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
	for _, t := range slices.Sorted(maps.Keys(rep.Deleted)) {
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
