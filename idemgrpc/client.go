package idemgrpc

import (
	"context"
	"crypto/rand"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemkit/idem/idemgrpc/internal/bridge"
)

// ClientConfig configures UnaryClientInterceptor. The zero value is
// usable: a fresh key on every call to a method that is not declared
// NO_SIDE_EFFECTS or IDEMPOTENT, no retries of its own.
type ClientConfig struct {
	// NewKey returns a fresh key, once per logical call. Defaults to
	// crypto/rand.Text (26 characters of base32).
	NewKey func() string

	// Methods reports whether calls to the full method get a key.
	// Defaults to every method except those declared NO_SIDE_EFFECTS or
	// IDEMPOTENT in Files.
	Methods func(fullMethod string) bool
	// Files finds method descriptors for the default of Methods. Defaults
	// to protoregistry.GlobalFiles.
	Files *protoregistry.Files

	// MaxAttempts, above 1, makes the interceptor retry a call itself, with
	// the same key, after an answer a retry can change: Unavailable, and
	// Aborted (a key in flight, a lost lease). It waits the RetryInfo delay
	// of the answer, else Backoff doubling up to MaxBackoff, and stops
	// when the call's context ends. Defaults to 1: the interceptor sets the
	// key and gRPC's own retry policy (which resends the same metadata)
	// retries.
	MaxAttempts int
	// Backoff is the first wait between attempts. Defaults to 50ms.
	Backoff time.Duration
	// MaxBackoff caps the wait between attempts. Defaults to 2s.
	MaxBackoff time.Duration
}

type keyCtx struct{}

// WithKey returns ctx whose calls through UnaryClientInterceptor carry key
// instead of a fresh one: the way to keep one key for a logical operation
// the application retries itself (after a restart, from a queue).
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// UnaryClientInterceptor returns an interceptor that sets the
// idempotency-key metadata on unary calls, generated once per logical
// call: gRPC's transparent retries and its retry policy resend the same
// metadata, and the interceptor's own attempts (ClientConfig.MaxAttempts)
// reuse it. A call whose outgoing metadata already has a key, or whose
// context has one from WithKey, keeps it.
func UnaryClientInterceptor(cfg ClientConfig) grpc.UnaryClientInterceptor {
	if cfg.NewKey == nil {
		cfg.NewKey = rand.Text
	}
	if cfg.Methods == nil {
		files := cfg.Files
		cfg.Methods = func(m string) bool { return !bridge.SafeMethod(bridge.Method(files, m)) }
	}
	retries := bridge.Retries{MaxAttempts: cfg.MaxAttempts, Backoff: cfg.Backoff, MaxBackoff: cfg.MaxBackoff,
		Retryable: retryable, DelayOf: retryDelayOf}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if !cfg.Methods(method) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if out, _ := metadata.FromOutgoingContext(ctx); len(out.Get(MetadataKey)) == 0 {
			key, _ := ctx.Value(keyCtx{}).(string)
			if key == "" {
				key = cfg.NewKey()
			}
			ctx = metadata.AppendToOutgoingContext(ctx, MetadataKey, key)
		}
		return retries.Do(ctx, func() error { return invoker(ctx, method, req, reply, cc, opts...) })
	}
}

// retryDelayOf is the RetryInfo delay of a status error, or 0.
func retryDelayOf(err error) time.Duration {
	if st := statusProto(err); st != nil {
		return bridge.RetryDelayOf(st.GetDetails())
	}
	return 0
}

func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted:
		return true
	}
	return false
}
