package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/inbox"
)

// Rerouter takes over failed deliveries from the consumer (Config.Reroute):
// instead of asking the broker to redeliver, the consumer hands the message
// and its error to Reroute, which publishes it durably somewhere else (a
// retry topic, a dead-letter topic). consumer/retrytopic implements it.
type Rerouter interface {
	// Reroute hands msg, whose processing failed with err, over to its
	// next stage and returns once that stage durably has it. On nil the
	// consumer acks the delivery; on an error wrapping [ErrNotRerouted] it
	// settles the delivery itself as without a Rerouter (Nak with backoff,
	// or the dead-letter store); on any other error it naks the delivery
	// with backoff, so a failed publish loses nothing.
	Reroute(ctx context.Context, msg idem.Message, err error) error
}

// ErrNotRerouted is returned by a [Rerouter] that leaves a failure to the
// consumer's own handling.
var ErrNotRerouted = errors.New("consumer: not rerouted")

// rerouted hands a failed delivery to Config.Reroute and reports whether
// the delivery is settled. Messages without a usable id and work held for
// reconciliation are never rerouted: they need the dead-letter store.
func (c *Consumer[TTx]) rerouted(ctx, sctx context.Context, dv broker.Delivery, msg idem.Message, err error, class string) bool {
	if c.cfg.Reroute == nil || errors.Is(err, ErrNoMessageID) || errors.Is(err, idem.ErrNeedsReconciliation) {
		return false
	}
	rerr := c.cfg.Reroute.Reroute(sctx, msg, err)
	switch {
	case errors.Is(rerr, ErrNotRerouted):
		return false
	case rerr != nil:
		delay := c.cfg.Backoff.Delay(max(msg.Attempt, 1), nil)
		c.log.ErrorContext(ctx, "rerouting failed; the broker redelivers the message", append(attrs(c.cfg.Name, msg), "error", rerr, "reason", err, "delay", delay)...)
		if nerr := dv.Nak(sctx, delay); nerr != nil {
			c.log.WarnContext(ctx, "nak failed; the broker redelivers after its ack wait", append(attrs(c.cfg.Name, msg), "error", nerr)...)
		}
		return true
	}
	c.cfg.Observer.Retry(c.cfg.Name)
	c.log.WarnContext(ctx, "processing failed; rerouted", append(attrs(c.cfg.Name, msg), "error", err, "class", class)...)
	if aerr := dv.Ack(sctx); aerr != nil {
		// The next stage has it; the redelivery is rerouted again or
		// suppressed by the inbox once one copy succeeded.
		c.log.WarnContext(ctx, "ack after rerouting failed", append(attrs(c.cfg.Name, msg), "error", aerr)...)
	}
	return true
}

// retryInPlace retries msg, which failed with err, in place (blocking
// retries): with the subscription paused, it waits Backoff and processes
// the message again in a new transaction, until it succeeds, fails for
// good or reaches MaxAttempts. It returns the last outcome, with the
// message's Attempt set to the last attempt made.
func (c *Consumer[TTx]) retryInPlace(ctx context.Context, msg idem.Message, err error) (inbox.Result, idem.Message, error) {
	var res inbox.Result
	held := false
	defer func() {
		if held {
			c.pause.release(ctx, c.log)
		}
	}()
	msg.Attempt = max(msg.Attempt, 1)
	for retryable(ctx, err) && msg.Attempt < c.cfg.MaxAttempts {
		if !held {
			c.pause.hold(ctx, c.log)
			held = true
		}
		delay := c.cfg.Backoff.Delay(msg.Attempt, nil)
		c.cfg.Observer.Failed(c.cfg.Name, idem.ErrorClass(err))
		c.cfg.Observer.Retry(c.cfg.Name)
		c.log.WarnContext(ctx, "processing failed; retrying in place", append(attrs(c.cfg.Name, msg), "error", err, "delay", delay)...)
		sleep(ctx, delay)
		if ctx.Err() != nil {
			return res, msg, err
		}
		msg.Attempt++
		var tx TTx
		if tx, err = c.d.Begin(ctx); err != nil {
			err = fmt.Errorf("consumer: begin: %w", err)
			continue
		}
		res, err = c.attempt(ctx, tx, msg)
	}
	return res, msg, err
}

func retryable(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && !idem.IsPermanent(err) && !errors.Is(err, idem.ErrNeedsReconciliation)
}

// gated consults Config.Gate before a fetch. While it is closed it holds
// the subscription's pause (once per worker, *gated), waits and returns
// true; when it opens again it releases the hold and returns false.
func (c *Consumer[TTx]) gated(ctx context.Context, gated *bool) bool {
	if c.cfg.Gate == nil {
		return false
	}
	open, after := c.cfg.Gate()
	if open {
		c.ungate(ctx, gated)
		return false
	}
	if !*gated {
		*gated = true
		c.pause.hold(ctx, c.log)
	}
	sleep(ctx, min(max(after, time.Millisecond), c.cfg.FetchWait))
	return true
}

func (c *Consumer[TTx]) ungate(ctx context.Context, gated *bool) {
	if *gated {
		*gated = false
		c.pause.release(ctx, c.log)
	}
}

// pauseHold pauses the subscriber (a broker.Pauser) while at least one
// worker holds it, and resumes it when the last one releases it.
type pauseHold struct {
	p  broker.Pauser // nil: the subscriber cannot pause
	mu sync.Mutex
	n  int // holders, protected by mu
}

func (h *pauseHold) hold(ctx context.Context, log *slog.Logger) {
	if h.p == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	if h.n == 1 {
		logPause(ctx, log, "paused", h.p.Pause(context.WithoutCancel(ctx)))
	}
}

func (h *pauseHold) release(ctx context.Context, log *slog.Logger) {
	if h.p == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n--
	if h.n == 0 {
		logPause(ctx, log, "resumed", h.p.Resume(context.WithoutCancel(ctx)))
	}
}

func logPause(ctx context.Context, log *slog.Logger, what string, err error) {
	if err != nil {
		log.WarnContext(ctx, "subscription not "+what, "error", err)
		return
	}
	log.DebugContext(ctx, "subscription "+what)
}
