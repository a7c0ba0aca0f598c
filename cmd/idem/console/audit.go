package console

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/audit"
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
var ErrNoAuditTable = audit.ErrNoTable

// ListAudit returns the audit entries matching f, newest first.
func ListAudit[TTx any](ctx context.Context, d store.Driver[TTx], f AuditFilter) ([]AuditEntry, error) {
	var action, from, to string
	if strings.HasSuffix(f.Action, ".") && len(f.Action) > 1 {
		// The prefix as a range: "dlq." ≤ action < "dlq/".
		from, to = f.Action, strings.TrimSuffix(f.Action, ".")+"/"
	} else {
		action = f.Action
	}
	var since int64
	if !f.Since.IsZero() {
		since = store.Micros(f.Since)
	}
	limit := int64(f.Limit)
	if limit == 0 {
		limit = 100
	}
	if limit < 0 {
		limit = math.MaxInt64
	}
	rows, err := d.Pool().Query(ctx, d.Statements().Audit.List, f.Actor, action, from, to, f.Target, f.Outcome, since, max(f.BeforeID, 0), limit)
	if err != nil {
		return nil, audit.Err(ctx, d, err)
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

// Installed reports whether d's database has the console's audit log
// (migration 0006_audit is applied); the console records every action
// there, so it needs it.
func Installed[TTx any](ctx context.Context, d store.Driver[TTx]) (bool, error) {
	return audit.Installed(ctx, d)
}
