// Package audit writes the operator audit log, table audit_log (migration
// 0006_audit): one row per operator action, written with outcome
// "started" before the action runs and completed with its outcome after,
// so that an action is never taken without a record. The dead-letter
// store (package dlq) and the console write it through here, so an action
// taken from the console, the idem command or the Go API leaves the same
// row.
package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/sqlmeta"
	"github.com/idemkit/idem/store"
)

// ErrNoTable reports a database without the audit_log table: migration
// 0006_audit has not been applied ("idem migrate up").
var ErrNoTable = errors.New("the audit_log table does not exist: run 'idem migrate up'")

// Installed reports whether d's database has the audit log.
func Installed[TTx any](ctx context.Context, d store.Driver[TTx]) (bool, error) {
	return sqlmeta.TableExists(ctx, d, "audit_log")
}

// Err turns a failure on a missing table into ErrNoTable.
func Err[TTx any](ctx context.Context, d store.Driver[TTx], err error) error {
	if ok, e := Installed(ctx, d); e == nil && !ok {
		return ErrNoTable
	}
	return fmt.Errorf("audit log: %w", err)
}

// Start records that actor starts action on target and returns the
// entry's id. Nothing may be done when it fails.
func Start[TTx any](ctx context.Context, d store.Driver[TTx], now time.Time, actor, action, target, reason, details string) (int64, error) {
	var id int64
	err := d.Pool().QueryRow(ctx, d.Statements().Audit.Start,
		store.Micros(now), Clean(actor), action, Clean(target), Clean(reason), Clean(details)).Scan(&id)
	if err != nil {
		return 0, Err(ctx, d, err)
	}
	return id, nil
}

// End records how entry id ended (err nil = ok) and its final details. It
// is written even when ctx is cancelled: the action has run.
func End[TTx any](ctx context.Context, d store.Driver[TTx], now time.Time, id int64, details string, err error) error {
	outcome := "ok"
	if err != nil {
		outcome = "failed: " + err.Error()
	}
	_, e := d.Pool().Exec(context.WithoutCancel(ctx), d.Statements().Audit.End, id, Clean(outcome), store.Micros(now), Clean(details))
	if e != nil {
		return fmt.Errorf("audit log: %w", e)
	}
	return nil
}

// Run runs act between Start and End: act does not run when Start fails;
// the details act returns are appended to details. It returns act's error,
// else End's.
func Run[TTx any](ctx context.Context, d store.Driver[TTx], now func() time.Time, actor, action, target, reason, details string,
	act func() (string, error)) error {
	id, err := Start(ctx, d, now(), actor, action, target, reason, details)
	if err != nil {
		return err
	}
	more, err := act()
	if more != "" {
		details = strings.TrimSpace(details + " " + more)
	}
	if e := End(ctx, d, now(), id, details, err); e != nil && err == nil {
		err = e
	}
	return err
}

// Clean makes s storable in a text column of every dialect and bounds it.
func Clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) > 8<<10 {
		s = strings.ToValidUTF8(s[:8<<10], "") + "…"
	}
	return s
}
