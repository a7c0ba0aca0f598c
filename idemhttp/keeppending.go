package idemhttp

import "context"

// KeepPending tells the two-phase middleware that the handler's outcome is
// unknown: its effect may or may not have happened (a proxy whose upstream
// connection broke after the request was sent, or whose upstream did not
// answer within the lease). The middleware then neither stores the
// response nor releases the key: the in_progress record stays until its
// lease ends, and after that [Config.ExpiredPolicy] decides — idem.Retake lets the
// next retry execute again (with the same key, for the downstream to
// deduplicate), Hold marks the key for reconciliation ("idem keys show",
// [ListHeld], the console). Until the lease ends a retry answers 409 in
// flight. The response the handler wrote (or its panic) still reaches the
// client.
//
// Without KeepPending a response that is not stored (5xx) releases the key
// at once and the next retry executes, which is right when the handler
// knows that nothing happened. KeepPending is a no-op in transactional
// mode (the transaction rolls back whatever the handler did through it)
// and outside the middleware.
func KeepPending(ctx context.Context) {
	if s := stateFrom(ctx); s != nil {
		s.keepPending.Store(true)
	}
}

// keptPending reports whether the handler called KeepPending, and logs it.
func (m *Middleware[TTx]) keptPending(ctx context.Context, req *request) bool {
	if !req.state.keepPending.Load() {
		return false
	}
	m.log.WarnContext(ctx, "outcome unknown: key left in progress until its lease ends, then the expired-lease policy decides",
		"idempotency_key", req.key, "tenant", req.tenant, "operation", req.operation, "policy", m.cfg.ExpiredPolicy.String())
	return true
}
