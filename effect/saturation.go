package effect

import (
	"time"
)

// Saturated reports whether the worker would not call kind's provider
// now: its breaker is open (Breaker.Allow returns an error; Saturated calls
// Allow, so a breaker that counts its half-open probes in Allow should not
// be polled this way) or its rate limit has no token left. retryAfter is
// when to ask again: the time until the next token, or the poll interval
// for an open breaker. An unknown kind is never saturated.
func (w *Worker[TTx]) Saturated(kindName string) (saturated bool, retryAfter time.Duration) {
	w.mu.Lock()
	k := w.kinds[kindName]
	w.mu.Unlock()
	if k == nil {
		return false, 0
	}
	if k.breaker != nil && k.breaker.Allow() != nil {
		return true, w.cfg.PollInterval
	}
	if k.lim != nil {
		if tok := k.lim.Tokens(); tok < 1 {
			if r := float64(k.lim.Limit()); r > 0 {
				return true, time.Duration((1 - tok) / r * float64(time.Second))
			}
			return true, w.cfg.PollInterval
		}
	}
	return false, 0
}

// Gate returns a gate for consumer.Config.Gate (backpressure): closed
// while any of kinds is [Worker.Saturated], so the consumer whose handler
// schedules those effects stops fetching (and pauses its subscription)
// instead of piling a broker backlog into the effects table faster than the
// provider takes it; the lag stays in the broker.
func (w *Worker[TTx]) Gate(kinds ...string) func() (open bool, retryAfter time.Duration) {
	return func() (bool, time.Duration) {
		for _, k := range kinds {
			if sat, after := w.Saturated(k); sat {
				return false, after
			}
		}
		return true, 0
	}
}
