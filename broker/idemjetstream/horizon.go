package idemjetstream

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/horizon"
)

// StreamHorizon reads the replay horizons of the subscriber's stream from
// the server: its max age (how long it keeps, and may redeliver, messages;
// horizon.Unlimited when it sets none) and its duplicate window. It
// implements [horizon.StreamReporter]; consumer.Consumer.Run uses it to
// refuse an inbox retention shorter than the max age.
func (s *Subscriber) StreamHorizon(ctx context.Context) (horizon.Stream, error) {
	return StreamHorizon(ctx, s.js, s.stream)
}

// StreamHorizon reads the max age and duplicate window of stream name.
func StreamHorizon(ctx context.Context, js jetstream.JetStream, name string) (horizon.Stream, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return horizon.Stream{}, fmt.Errorf("jetstream: stream %q: %w", name, classify(err))
	}
	cfg := st.CachedInfo().Config
	h := horizon.Stream{Name: name, MaxAge: cfg.MaxAge, DuplicateWindow: cfg.Duplicates, Source: "jetstream stream config"}
	if h.MaxAge <= 0 {
		h.MaxAge = horizon.Unlimited
	}
	return h, nil
}
