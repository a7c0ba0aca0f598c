package boxoffice

import (
	"context"
	"net/http"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/fakeprovider"
)

// defaultEffectConcurrency is Config.EffectConcurrency's default.
//
// Under the soak's load (32 clients posting orders) every claim and every
// batch of completions waits for the database: on PostgreSQL for a pool
// connection behind the API's transactions (at 8, a claim of one or two
// rows per freed slot drained 27-41/s while 200+ orders/s came in), on
// SQLite for the one write lock, which the busy handler hands out unfairly
// to 32 clients' transactions: a claim-and-complete cycle took about 0.4 s
// there, so at 32 the worker sent about 80 e-mails/s while 110 orders/s
// came in (scheduled -> sent p50 11.7 s, the last e-mail 5.6-11.4 s after
// the last order). The worker claims what is due up to its free slots, so
// with 128 a cycle takes everything that came in meanwhile: scheduled ->
// sent p50 0.75 s, the last e-mail 0.5 s after the last order. The calls
// go to the provider concurrently; the provider's client keeps as many
// idle connections.
const defaultEffectConcurrency = 128

// effectWorker builds the e-mail sender: an effect worker whose performer
// posts the e-mail to the provider with the effect key as its
// Idempotency-Key, so a call repeated after a crash or a time-out is
// answered from the provider's record instead of sending twice.
func (s *System[TTx]) effectWorker() (*effect.Worker[TTx], error) {
	w, err := effect.NewWorker(s.ledger, effect.WorkerConfig[TTx]{
		Concurrency:  s.cfg.EffectConcurrency,
		PollInterval: s.cfg.PollInterval,
		MaxAttempts:  effectMaxAttempts,
		Backoff:      effect.FullJitter(s.cfg.RetryBase, s.cfg.RetryMax),
		Logger:       s.cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	// idemhttp.Transport sends the call's traceparent (the idem.effect.call
	// span) with it; the key is set by the client itself. The base
	// transport keeps an idle connection per call in flight (the default
	// keeps 2 per host, so concurrent calls would open and close
	// connections all the time).
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = s.cfg.EffectConcurrency
	base.MaxIdleConns = max(base.MaxIdleConns, s.cfg.EffectConcurrency)
	client := &fakeprovider.Client{BaseURL: s.cfg.ProviderURL, Timeout: s.cfg.EffectCallTimeout,
		HTTPClient: &http.Client{Transport: &idemhttp.Transport{Base: base}}}
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
