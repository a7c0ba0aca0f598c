package effect

import (
	"time"
)

// Saturated reports whether kind's provider takes no more work now: its
// breaker is open (Breaker.Allow returns an error; Saturated calls Allow,
// so a breaker that counts its half-open probes in Allow should not be
// polled this way), its rate limit has no token left, or the worker's last
// claim of the kind got every effect it asked for (as many as it had
// tokens and free slots for), a claim of the kind is under way, or every
// slot of the worker is busy: due effects may be waiting behind the limit. retryAfter is when to ask again: the time until the next token,
// the poll interval for an open breaker, 10ms for a kind at full
// concurrency without a rate limit. An unknown kind is never saturated.
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
	backlogged := k.backlogged.Load()
	if k.lim == nil {
		if backlogged {
			return true, 10 * time.Millisecond
		}
		return false, 0
	}
	tok := k.lim.Tokens()
	if tok >= 1 && !backlogged {
		return false, 0
	}
	if r := float64(k.lim.Limit()); r > 0 {
		need := 1 - tok // tokens until the next call
		if need <= 0 {
			need = 1 // backlogged: ask again after one more token
		}
		return true, time.Duration(need / r * float64(time.Second))
	}
	return true, w.cfg.PollInterval
}

// Gate returns a gate for consumer.Config.Gate (backpressure): closed
// while any of kinds is [Worker.Saturated], so the consumer whose handler
// schedules those effects stops fetching (and pauses its subscription)
// instead of piling a broker backlog into the effects table faster than the
// provider takes it; the lag stays in the broker. The gate reflects this
// worker's own claims and limits (the rate limit is per Worker): use it in
// the process that runs the worker.
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

// markBacklogged marks every kind backlogged: every slot of the worker is
// busy, so none of them can take more work until one frees.
func markBacklogged(kinds []*kind) {
	for _, k := range kinds {
		k.backlogged.Store(true)
	}
}
