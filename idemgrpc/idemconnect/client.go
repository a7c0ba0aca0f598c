package idemconnect

import (
	"context"
	"crypto/rand"
	"time"

	"connectrpc.com/connect"

	"github.com/idemkit/idem/idemgrpc/internal/bridge"
)

// ClientConfig configures NewClientInterceptor, as idemgrpc.ClientConfig.
// The zero value is usable: a fresh key on every unary call to a
// procedure that is not declared NO_SIDE_EFFECTS or IDEMPOTENT, no
// retries.
type ClientConfig struct {
	// NewKey returns a fresh key, once per logical call. Defaults to
	// crypto/rand.Text.
	NewKey func() string
	// Procedures reports whether calls to the procedure get a key.
	// Defaults to every procedure whose idempotency level is neither
	// NoSideEffects nor Idempotent.
	Procedures func(procedure string) bool
	// MaxAttempts, above 1, makes the interceptor retry a call itself,
	// with the same key, after Unavailable or Aborted, waiting the
	// RetryInfo delay of the answer, else Backoff doubling up to
	// MaxBackoff. Defaults to 1 (connect-go has no retries of its own).
	MaxAttempts int
	// Backoff is the first wait between attempts. Defaults to 50ms.
	Backoff time.Duration
	// MaxBackoff caps the wait between attempts. Defaults to 2s.
	MaxBackoff time.Duration
}

type keyCtx struct{}

// WithKey returns ctx whose calls through the client interceptor carry key
// instead of a fresh one: the way to keep one key for a logical operation
// the application retries itself.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// NewClientInterceptor returns a client interceptor that sets the
// Idempotency-Key header on unary calls, generated once per logical call
// and kept across its own attempts (ClientConfig.MaxAttempts). A request
// that already has the header, or whose context has a key from WithKey,
// keeps it.
func NewClientInterceptor(cfg ClientConfig) connect.Interceptor {
	if cfg.NewKey == nil {
		cfg.NewKey = rand.Text
	}
	return &client{cfg: cfg, retries: bridge.Retries{MaxAttempts: cfg.MaxAttempts, Backoff: cfg.Backoff,
		MaxBackoff: cfg.MaxBackoff, Retryable: retryable, DelayOf: retryDelayOf}}
}

type client struct {
	cfg     ClientConfig
	retries bridge.Retries
}

func (c *client) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c *client) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func (c *client) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if !spec.IsClient || !c.applies(spec) {
			return next(ctx, req)
		}
		if req.Header().Get(HeaderKey) == "" {
			key, _ := ctx.Value(keyCtx{}).(string)
			if key == "" {
				key = c.cfg.NewKey()
			}
			req.Header().Set(HeaderKey, key)
		}
		var res connect.AnyResponse
		err := c.retries.Do(ctx, func() (err error) {
			res, err = next(ctx, req)
			return err
		})
		return res, err
	}
}

func (c *client) applies(spec connect.Spec) bool {
	if c.cfg.Procedures != nil {
		return c.cfg.Procedures(spec.Procedure)
	}
	return spec.IdempotencyLevel != connect.IdempotencyNoSideEffects && spec.IdempotencyLevel != connect.IdempotencyIdempotent
}

func retryable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeAborted:
		return true
	}
	return false
}
