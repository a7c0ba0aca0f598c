package idem

import (
	"context"
	"time"
)

// Observer receives what idem's runnable parts count, for metrics. It is
// the type of the Observer field of every such part's configuration:
// consumer.Config, outbox.RelayConfig, effect.WorkerConfig (and through it
// saga.WorkerConfig), retention.Config, webhook.ReceiverConfig and
// idemhttp.Config. *idemmetrics.Metrics implements it (Prometheus, idem_*
// names); a nil Observer records nothing.
//
// A part calls only the methods of its own events (listed by part below),
// from many goroutines at once: an implementation must be safe for
// concurrent use and fast (no I/O). An implementation that cares about a
// few events only can embed a nil *idemmetrics.Metrics, whose methods do
// nothing, and override those.
type Observer interface {
	// Consumer (component "consumer"), webhook receiver (component
	// "webhook", consumer "webhook:<source>").

	// Start counts a handler run of consumer in flight; done ends it and
	// observes its duration.
	Start(consumer string) (done func())
	// Processed counts a message whose handler ran and committed.
	Processed(consumer string)
	// DuplicateContext counts a duplicate suppressed by component, with ctx
	// for an exemplar.
	DuplicateContext(ctx context.Context, component, consumer string)
	// FingerprintConflict counts an id reused with another payload.
	FingerprintConflict(component, consumer string)
	// Failed counts a failed processing attempt by error class
	// ([ErrorClass]).
	Failed(consumer, class string)
	// Retry counts a delivery sent back for redelivery.
	Retry(consumer string)
	// DeadLetteredContext counts a message parked in the dead-letter
	// store, by error class, with ctx for an exemplar.
	DeadLetteredContext(ctx context.Context, consumer, class string)
	// Unidentified counts a message parked for having no usable id.
	Unidentified(consumer string)

	// HTTP middleware (idemhttp).

	// HTTPRequest counts a keyed request by the middleware's decision:
	// executed, replayed, in_flight, mismatch or rejected (the values of
	// the idem.decision attribute of the idem.http span).
	HTTPRequest(ctx context.Context, decision string)

	// Outbox relay.

	// OutboxPublished counts n events acknowledged by the broker and
	// marked published.
	OutboxPublished(n int)
	// OutboxDuplicate counts an event the broker reported as already
	// stored inside its dedup window (a republish).
	OutboxDuplicate(ctx context.Context)
	// OutboxParked counts an event parked after its last attempt (or a
	// permanent error), by error class ([ErrorClass]).
	OutboxParked(ctx context.Context, class string)
	// OutboxPublishDuration observes the time of one broker publish of a
	// batch of events, whatever its outcome.
	OutboxPublishDuration(d time.Duration)

	// Effect worker.

	// EffectHeld counts an effect of kind held for reconciliation because
	// its provider key is older than the kind's key lifetime.
	EffectHeld(kind string)

	// Retention GC.

	// GCDeleted counts n rows deleted from table by one batch.
	GCDeleted(table string, n int64)
}
