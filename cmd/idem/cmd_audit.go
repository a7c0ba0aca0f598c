package main

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/cmd/idem/console"
)

// runAudit implements "idem audit list": the operator actions recorded in
// the audit log (who, when, what, on what, why, outcome), newest first: the
// console's, and every dead-letter redrive, discard and revision, taken
// from the console, idem dlq or a program (package dlq writes those).
func runAudit(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "audit", "list [--db URL] [--actor NAME] [--action ACTION] [--since 24h] [--limit 100] [--json]")
	dbURL := fs.String("db", "", "database URL (postgres://…, mysql://… or sqlite://path); default $IDEM_DATABASE_URL or "+defaultDatabaseURL)
	actor := fs.String("actor", "", "only actions by this operator")
	action := fs.String("action", "", `only this action, or a prefix ending in "." (dlq., held., keys., outbox.)`)
	since := fs.String("since", "", "only actions at or after this time (RFC 3339, or a duration ago such as 24h)")
	limit := fs.Int("limit", 100, "at most this many entries (0 = no limit)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	pos := fs.Args()
	if len(pos) == 0 {
		return fmt.Errorf("%w: missing action (list; run 'idem audit -h')", errUsage)
	}
	if pos[0] != "list" {
		return fmt.Errorf("%w: unknown action %q (want list)", errUsage, pos[0])
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: list takes no arguments (got %q)", errUsage, pos[1:])
	}
	if *limit < 0 {
		return fmt.Errorf("%w: --limit must not be negative", errUsage)
	}
	f := console.AuditFilter{Actor: *actor, Action: *action, Limit: *limit}
	if *limit == 0 {
		f.Limit = -1
	}
	var err error
	if f.Since, err = dlqParseWhen(*since, time.Now()); err != nil {
		return fmt.Errorf("%w: --since: %v", errUsage, err)
	}
	if env.CheckOnly {
		return nil
	}
	d, err := openSQL(ctx, databaseURL(env, *dbURL), mustExist)
	if err != nil {
		return err
	}
	defer d.Close()
	es, err := console.ListAudit(ctx, d, f)
	if err != nil {
		return err
	}
	return printList(env, *asJSON, es, "no operator actions recorded", "ID\tWHEN\tWHO\tACTION\tTARGET\tREASON\tOUTCOME\tDETAILS",
		func(e console.AuditEntry) string {
			return fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s", e.ID, e.At.UTC().Format(time.RFC3339), termSafe(e.Actor),
				termSafe(e.Action), termSafe(dlqTruncate(e.Target, 60)), termSafe(dlqTruncate(e.Reason, 40)),
				termSafe(dlqTruncate(e.Outcome, 40)), termSafe(dlqTruncate(e.Details, 80)))
		})
}
