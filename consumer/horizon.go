package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/horizon"
	"github.com/idemkit/idem/internal/sqlmeta"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/retention"
	"github.com/idemkit/idem/store"
)

// ErrRetentionTooShort reports a consumer whose inbox retention is shorter
// than its stream's max age: the broker may redeliver a message after the
// inbox forgot its id, and the redelivery would be processed again. It is
// retention.ErrRetentionTooShort.
var ErrRetentionTooShort = retention.ErrRetentionTooShort

// RetentionError is [Consumer.Run]'s refusal to start with an inbox
// retention shorter than the stream's max age. It matches
// [ErrRetentionTooShort].
type RetentionError struct {
	Consumer     string
	Stream       string
	Retention    time.Duration // the consumer's inbox retention
	StreamMaxAge time.Duration // the stream's max age
	Source       string        // where the max age comes from
}

// Error implements error.
func (e *RetentionError) Error() string {
	return fmt.Sprintf("consumer %q: %v: the inbox keeps message ids %s but stream %q (%s) keeps messages %s, "+
		"so a message redelivered after %s would be processed again; raise the inbox retention "+
		"(inbox.Config.RetentionFor[%q]) to at least %s, or set Config.AcceptShortRetention to start anyway",
		e.Consumer, ErrRetentionTooShort, horizon.Format(e.Retention), e.Stream, e.Source, horizon.Format(e.StreamMaxAge),
		horizon.Format(e.Retention), e.Consumer, horizon.Format(e.StreamMaxAge))
}

// Is reports whether target is ErrRetentionTooShort.
func (e *RetentionError) Is(target error) bool { return target == ErrRetentionTooShort }

// Horizon returns the consumer's declared horizons and its stream's: the
// inbox retention of Config.Name, and the stream's max age from
// Config.StreamMaxAge or, when that is 0, from the subscriber if it
// implements [horizon.StreamReporter] (the JetStream adapter reads the
// stream config). A stream whose horizons are unknown has MaxAge 0. The
// error is a failure to read the stream's horizons, or a [RetentionError].
func (c *Consumer[TTx]) Horizon(ctx context.Context) (horizon.Consumer, horizon.Stream, error) {
	hc := horizon.Consumer{Name: c.cfg.Name, InboxRetention: c.ib.RetentionOf(c.cfg.Name)}
	var st horizon.Stream
	switch rep, ok := c.sub.(horizon.StreamReporter); {
	case c.cfg.StreamMaxAge != 0:
		st = horizon.Stream{MaxAge: c.cfg.StreamMaxAge, Source: "consumer config"}
	case ok:
		var err error
		if st, err = rep.StreamHorizon(ctx); err != nil {
			return hc, st, err
		}
	}
	hc.Stream = st.Name
	if st.MaxAge > 0 && hc.InboxRetention < st.MaxAge || st.MaxAge == horizon.Unlimited && c.cfg.StreamMaxAge == horizon.Unlimited {
		return hc, st, &RetentionError{Consumer: c.cfg.Name, Stream: st.Name, Retention: hc.InboxRetention,
			StreamMaxAge: st.MaxAge, Source: st.Source}
	}
	return hc, st, nil
}

// checkRetention is Run's start-up check: a too-short retention stops
// the start unless Config.AcceptShortRetention; a stream whose horizons
// cannot be read is logged and not checked.
func (c *Consumer[TTx]) checkRetention(ctx context.Context) error {
	_, _, err := c.Horizon(ctx)
	var re *RetentionError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &re) && c.cfg.AcceptShortRetention:
		c.log.WarnContext(ctx, "starting with an inbox retention shorter than the stream's max age (AcceptShortRetention)", "error", err)
		return nil
	case errors.As(err, &re):
		return err
	}
	c.log.WarnContext(ctx, "cannot read the stream's max age; inbox retention not checked", "error", err)
	return nil
}

// recordTimeout bounds Run's first attempt to record the retention.
const recordTimeout = 2 * time.Second

// recordRetention is Run's record of the consumer's inbox retention in
// the database (inbox.Inbox.RecordRetention), so that a dead-letter
// redrive from another process is judged by the retention the consumer
// really has. A database without the table (not migrated) is an error:
// the consumer does not start. Any other failure (on SQLite, another
// process's long write transaction holding the lock) does not keep the
// consumer from serving, which could be what that transaction waits for:
// again is true, and Run records it in the background
// ([Consumer.recordRetentionLater]); until it succeeds a redrive is judged
// by the previous record (or the default). A failure because ctx ended is
// no error: Run is stopping, and serves nothing.
func (c *Consumer[TTx]) recordRetention(ctx context.Context) (again bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, recordTimeout)
	err = c.ib.RecordRetention(rctx, c.cfg.Name)
	cancel()
	switch {
	case err == nil || ctx.Err() != nil:
		return false, nil
	case !tableExists(ctx, c.d, "consumer_horizons"):
		return false, fmt.Errorf("consumer %q: %w (run 'idem migrate up': migration 0015_consumer_horizons)", c.cfg.Name, err)
	}
	// The table is there, but a later migration of it may not be
	// (0017_retention_widening's columns, say). Any missing migration
	// refuses the start: this build's statements expect every one.
	cctx, ccancel := context.WithTimeout(ctx, recordTimeout)
	cerr := migrate.Check(cctx, c.d)
	ccancel()
	if errors.Is(cerr, migrate.ErrNotMigrated) {
		return false, fmt.Errorf("consumer %q: record the inbox retention: %w", c.cfg.Name, cerr)
	}
	c.log.WarnContext(ctx, "inbox retention not recorded yet; serving, and recording it in the background", "error", err)
	return true, nil
}

// recordRetentionLater retries recordRetention's record until it succeeds
// or ctx ends, with a backoff from 500ms to 30s.
func (c *Consumer[TTx]) recordRetentionLater(ctx context.Context) {
	for delay := 500 * time.Millisecond; ; delay = min(2*delay, 30*time.Second) {
		sleep(ctx, delay)
		if ctx.Err() != nil {
			return
		}
		err := c.ib.RecordRetention(ctx, c.cfg.Name)
		if err == nil {
			c.log.InfoContext(ctx, "inbox retention recorded")
			return
		}
		if ctx.Err() == nil {
			c.log.WarnContext(ctx, "inbox retention not recorded yet; retrying", "error", err, "delay", delay)
		}
	}
}

// tableExists reports whether d's database has table name (false when
// that cannot be read either).
func tableExists[TTx any](ctx context.Context, d store.Driver[TTx], name string) bool {
	ok, err := sqlmeta.TableExists(ctx, d, name)
	return ok && err == nil
}
