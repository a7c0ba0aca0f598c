package console

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem/store"
)

// AuditEntry is one operator action in the audit log (table audit_log,
// migration 0006_audit).
type AuditEntry struct {
	ID      int64     `json:"id"`
	At      time.Time `json:"at"`               // when the action started
	Actor   string    `json:"actor"`            // who: the operator name given at login, or the Idem-Operator header
	Action  string    `json:"action"`           // what: dlq.redrive, dlq.discard, dlq.revise, held.effect.resolve, …
	Target  string    `json:"target"`           // on what: "letter 42", "effect order-confirmed-email:…", …
	Reason  string    `json:"reason,omitempty"` // why, as the operator wrote it
	Details string    `json:"details,omitempty"`
	// Outcome is "started" while the action runs (and forever if the
	// process died during it), then "ok" or "failed: <error>".
	Outcome string    `json:"outcome"`
	EndedAt time.Time `json:"ended_at,omitzero"`
}

// AuditFilter selects audit entries. Zero fields do not filter.
type AuditFilter struct {
	Actor    string
	Action   string // exact action, or a prefix ending in "." ("dlq.")
	Target   string // exact target ("letter 42")
	Outcome  string // exact outcome ("ok")
	Since    time.Time
	BeforeID int64 // only entries with a smaller id (paging, newest first)
	Limit    int   // defaults to 100; negative = no limit
}

// ErrNoAuditTable reports a database without the audit_log table:
// migration 0006_audit has not been applied ("idem migrate up").
var ErrNoAuditTable = errors.New("console: the audit_log table does not exist: run 'idem migrate up'")

const auditCols = `id, at, actor, action, target, reason, details, outcome, ended_at`

// ListAudit returns the audit entries matching f, newest first.
func ListAudit[TTx any](ctx context.Context, d store.Driver[TTx], f AuditFilter) ([]AuditEntry, error) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.Actor != "" {
		add("actor = $%d", f.Actor)
	}
	if strings.HasSuffix(f.Action, ".") && len(f.Action) > 1 {
		// The prefix as a range: "dlq." ≤ action < "dlq/".
		add("action >= $%d", f.Action)
		add("action < $%d", strings.TrimSuffix(f.Action, ".")+"/")
	} else if f.Action != "" {
		add("action = $%d", f.Action)
	}
	if f.Target != "" {
		add("target = $%d", f.Target)
	}
	if f.Outcome != "" {
		add("outcome = $%d", f.Outcome)
	}
	if !f.Since.IsZero() {
		add("at >= $%d", store.Micros(f.Since))
	}
	if f.BeforeID > 0 {
		add("id < $%d", f.BeforeID)
	}
	sql := `SELECT ` + auditCols + ` FROM ` + d.Table("audit_log")
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += " ORDER BY id DESC"
	limit := f.Limit
	if limit == 0 {
		limit = 100
	}
	if limit > 0 {
		sql += fmt.Sprintf(" LIMIT %d", limit)
	}
	rows, err := d.Pool().Query(ctx, sql, args...)
	if err != nil {
		return nil, auditErr(ctx, d, err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var e AuditEntry
		var at, ended int64
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.Action, &e.Target, &e.Reason, &e.Details, &e.Outcome, &ended); err != nil {
			return nil, err
		}
		e.At, e.EndedAt = store.FromMicros(at), store.FromMicros(ended)
		out = append(out, e)
	}
	return out, rows.Err()
}

// auditErr turns a failure on a missing table into ErrNoAuditTable.
func auditErr[TTx any](ctx context.Context, d store.Driver[TTx], err error) error {
	if ok, e := tableExists(ctx, d, "audit_log"); e == nil && !ok {
		return ErrNoAuditTable
	}
	return fmt.Errorf("console: audit log: %w", err)
}

// auditStart records that actor starts action on target and returns the
// entry's id. Nothing may be done when it fails.
func auditStart[TTx any](ctx context.Context, d store.Driver[TTx], now time.Time, actor, action, target, reason, details string) (int64, error) {
	var id int64
	err := d.Pool().QueryRow(ctx, `INSERT INTO `+d.Table("audit_log")+` (at, actor, action, target, reason, details, outcome)
 VALUES ($1, $2, $3, $4, $5, $6, 'started') RETURNING id`,
		store.Micros(now), clean(actor), action, clean(target), clean(reason), clean(details)).Scan(&id)
	if err != nil {
		return 0, auditErr(ctx, d, err)
	}
	return id, nil
}

// auditEnd records how entry id ended (err nil = ok) and its final
// details.
func auditEnd[TTx any](ctx context.Context, d store.Driver[TTx], now time.Time, id int64, details string, err error) error {
	outcome := "ok"
	if err != nil {
		outcome = "failed: " + err.Error()
	}
	_, e := d.Pool().Exec(context.WithoutCancel(ctx), `UPDATE `+d.Table("audit_log")+` SET outcome = $2, ended_at = $3, details = $4
 WHERE id = $1`, id, clean(outcome), store.Micros(now), clean(details))
	if e != nil {
		return fmt.Errorf("console: audit log: %w", e)
	}
	return nil
}

// clean makes s storable in a text column of every dialect and bounds it.
func clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) > 8<<10 {
		s = strings.ToValidUTF8(s[:8<<10], "") + "…"
	}
	return s
}

// countConflictLetters counts the dead letters parked for a message id
// reused with a different payload: the fingerprint conflicts of the
// consumers, which the database knows whichever process saw them.
func countConflictLetters[TTx any](ctx context.Context, d store.Driver[TTx]) (int64, error) {
	var n int64
	err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM `+d.Table("dead_letters")+` WHERE error_class = 'fingerprint_mismatch'`).Scan(&n)
	return n, err
}

// countInboxStates counts inbox rows by state (processing, completed,
// failed); idemmetrics.Snapshot counts them by consumer.
func countInboxStates[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	rows, err := d.Pool().Query(ctx, `SELECT state, count(*) FROM `+d.Table("inbox")+` GROUP BY state`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[st] = n
	}
	return out, rows.Err()
}
