package outbox

import (
	"context"
	"time"

	"github.com/idemkit/idem/horizon"
)

// RetrySpan returns how long after its first publish attempt the relay may
// still publish one event again: the backoff ceilings of MaxAttempts-1
// retries plus one ClaimTTL (a relay that dies between the broker's ack and
// the mark leaves its claim to run out, then the event is published again
// with the same id). Attempts failed because the broker was down are not
// counted, so an outage lengthens the span without bound.
func (r *Relay[TTx]) RetrySpan() time.Duration {
	var span time.Duration
	for n := 1; n < r.cfg.MaxAttempts; n++ {
		span += r.backoffCeil(n)
	}
	return span + r.cfg.ClaimTTL
}

// backoffCeil is the upper bound of the full-jitter delay after the n-th
// attempt (n ≥ 1).
func (r *Relay[TTx]) backoffCeil(n int) time.Duration { return r.bo.Ceil(n) }

// warnHorizon logs a warning when the relay's retry span outlives the
// broker's duplicate window (RelayConfig.DuplicateWindow): a republish
// after the window is stored by the broker a second time. The consumers'
// inboxes still deduplicate it; the broker no longer does.
func (r *Relay[TTx]) warnHorizon() bool {
	w := r.cfg.DuplicateWindow
	if w <= 0 {
		return false
	}
	span := r.RetrySpan()
	if span <= w {
		return false
	}
	r.log.WarnContext(context.Background(), "the relay's retry span outlives the broker's duplicate window: a late republish "+
		"is stored twice by the broker (the consumers' inboxes still deduplicate it)",
		"retry_span", horizon.Format(span), "duplicate_window", horizon.Format(w),
		"max_attempts", r.cfg.MaxAttempts, "max_backoff", r.cfg.MaxBackoff, "claim_ttl", r.cfg.ClaimTTL)
	return true
}
