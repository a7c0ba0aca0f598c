package boxoffice

import (
	"context"
	"net/http"
	"time"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/fakeprovider"
	"github.com/idemkit/idem/idemhttp"
)

// effectWorker builds the e-mail sender: an effect worker whose performer
// posts the e-mail to the provider with the effect key as its
// Idempotency-Key, so a call repeated after a crash or a time-out is
// answered from the provider's record instead of sending twice.
func (s *System[TTx]) effectWorker() (*effect.Worker[TTx], error) {
	// Concurrency 32: under the soak's load each claim waits for a pool
	// connection behind the API's transactions, so the worker keeps up only
	// when one claim leases many e-mails (at 8, a claim of one or two rows
	// per freed slot drained 27-41/s while 200+ orders/s came in).
	w, err := effect.NewWorker(s.ledger, effect.WorkerConfig[TTx]{
		Concurrency:  32,
		PollInterval: s.cfg.PollInterval,
		MaxAttempts:  effectMaxAttempts,
		Backoff:      effect.FullJitter(s.cfg.RetryBase, s.cfg.RetryMax),
		Logger:       s.cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	// idemhttp.Transport sends the call's traceparent (the idem.effect.call
	// span) with it; the key is set by the client itself.
	client := &fakeprovider.Client{BaseURL: s.cfg.ProviderURL, Timeout: s.cfg.EffectCallTimeout,
		HTTPClient: &http.Client{Transport: &idemhttp.Transport{}}}
	var p effect.Performer = func(ctx context.Context, key string, payload []byte) ([]byte, error) {
		return client.Send(ctx, key, payload)
	}
	if s.cfg.Hooks.WrapPerformer != nil {
		p = s.cfg.Hooks.WrapPerformer(p)
	}
	if err := w.Register(EffectKindEmail, p); err != nil {
		return nil, err
	}
	return w, nil
}

var _ = time.Second
