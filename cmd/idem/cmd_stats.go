package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem/idemmetrics"
)

func runStats(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "stats", "[--db URL] [--json]")
	dbURL := fs.String("db", "", "database URL (postgres://…, mysql://… or sqlite://path); default $IDEM_DATABASE_URL or "+defaultDatabaseURL)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if env.CheckOnly {
		return nil
	}
	d, err := openSQL(ctx, databaseURL(env, *dbURL), mustExist)
	if err != nil {
		return err
	}
	defer d.Close()
	st, err := idemmetrics.Snapshot(ctx, d, time.Now())
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(env, st)
	}
	tw := newTable(env)
	fmt.Fprintln(tw, "SECTION\tITEM\tCOUNT")
	section := func(name string, c idemmetrics.Counts, item string) {
		fmt.Fprintf(tw, "%s\ttotal\t%d\n", name, c.Total)
		for _, k := range slices.Sorted(maps.Keys(c.By)) {
			fmt.Fprintf(tw, "%s\t%s %s\t%d\n", name, item, termSafe(k), c.By[k])
		}
	}
	section("inbox", st.Inbox, "consumer")
	section("http keys", st.HTTPKeys, "state")
	fmt.Fprintf(tw, "outbox\tpending\t%d\n", st.Outbox.Pending)
	fmt.Fprintf(tw, "outbox\tpublished\t%d\n", st.Outbox.Published)
	fmt.Fprintf(tw, "outbox\tparked\t%d\n", st.Outbox.Parked)
	fmt.Fprintf(tw, "outbox\tlag seconds\t%.3f\n", st.Outbox.LagSeconds)
	section("effects", st.Effects, "state")
	section("dead letters", st.DeadLetters, "state")
	for _, k := range slices.Sorted(maps.Keys(st.DeadParked.By)) {
		fmt.Fprintf(tw, "dead letters\tparked consumer %s\t%d\n", termSafe(k), st.DeadParked.By[k])
	}
	// Already counted above; this line says what the operator must fix.
	for _, k := range slices.Sorted(maps.Keys(st.DeadNoID.By)) {
		fmt.Fprintf(tw, "dead letters\tno message id, consumer %s (set consumer.Config.MessageID)\t%d\n", termSafe(k), st.DeadNoID.By[k])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.TablesMissing) > 0 {
		fmt.Fprintf(env.Stdout, "\nmissing tables (run 'idem migrate up'): %s\n", strings.Join(st.TablesMissing, ", "))
	}
	return nil
}
