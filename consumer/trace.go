package consumer

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/obs"
)

// The values of the idem.decision attribute of the idem.consume span.
const (
	decisionProcessed    = "processed"     // the handler ran and its transaction committed
	decisionDuplicate    = "duplicate"     // the inbox had the message: acked without running the handler
	decisionMismatch     = "mismatch"      // the message id came before with another payload
	decisionDeadLettered = "dead_lettered" // parked in the dead-letter store (permanent, or out of attempts)
	decisionRetry        = "retry"         // sent back for redelivery
	decisionRerouted     = "rerouted"      // handed to Config.Reroute (a retry or dead-letter topic), then acked
)

// consumeSpan is the idem.consume span of one delivery, in its context.
type consumeSpan struct{ span trace.Span }

type consumeKey struct{}

// batchKey holds, in a batch's context, the span of each message by id,
// so the handler of each message runs under its own delivery's span.
type batchKey struct{}

// startConsume opens the idem.consume span of dv, a child of the context
// the producer injected into the message's headers (idem.relay.publish),
// and returns the context carrying it and the message id as causation
// (for the outbox's causation header).
func (c *Consumer[TTx]) startConsume(ctx context.Context, dv broker.Delivery) context.Context {
	msg := dv.Message()
	sctx, span := c.tr.Start(obs.Extract(ctx, msg.Headers), obs.SpanConsume, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(obs.AttrConsumer.String(c.cfg.Name), obs.AttrAttempt.Int(msg.Attempt))
	}
	return context.WithValue(sctx, consumeKey{}, &consumeSpan{span})
}

// consuming returns ctx with a consume span for dv: the one it has, or a
// new one.
func (c *Consumer[TTx]) consuming(ctx context.Context, dv broker.Delivery) context.Context {
	if _, ok := ctx.Value(consumeKey{}).(*consumeSpan); ok {
		return ctx
	}
	return c.startConsume(ctx, dv)
}

// endConsume ends the consume span of ctx (if any) with the decision taken
// for msg.
func endConsume(ctx context.Context, msg idem.Message, decision string, err error) {
	cs, ok := ctx.Value(consumeKey{}).(*consumeSpan)
	if !ok {
		return
	}
	if errors.Is(err, idem.ErrFingerprintMismatch) {
		if cs.span.IsRecording() {
			cs.span.SetAttributes(obs.AttrOutcome.String(decision))
		}
		decision = decisionMismatch
	}
	if cs.span.IsRecording() {
		cs.span.SetAttributes(obs.AttrMessageID.String(msg.ID), obs.AttrDecision.String(decision))
	}
	obs.End(cs.span, err)
}

// withBatch returns the batch context mapping each message id to the
// span of its delivery context.
func withBatch(ctx context.Context, msgs []idem.Message, ctxs []context.Context) context.Context {
	m := make(map[string]trace.Span, len(msgs))
	for i, msg := range msgs {
		if _, ok := m[msg.ID]; !ok { // a repeat in the batch is the duplicate
			m[msg.ID] = trace.SpanFromContext(ctxs[i])
		}
	}
	return context.WithValue(ctx, batchKey{}, m)
}

// MessageContext returns the context the Handler of msg receives: ctx with
// the span of msg's delivery (its idem.consume span; in a batch, looked up
// by msg's id) and msg's id as causation. A BatchHandler receives the
// batch's context; it uses MessageContext for what it records per message,
// e.g. the trace context of an effect it schedules for msg
// (effect.TraceContext).
func MessageContext(ctx context.Context, msg idem.Message) context.Context {
	return handlerContext(ctx, msg)
}

// handlerContext is the context the handler of msg runs with: the span of
// its delivery (in a batch, looked up by id) and msg's id as causation.
func handlerContext(ctx context.Context, msg idem.Message) context.Context {
	if m, ok := ctx.Value(batchKey{}).(map[string]trace.Span); ok {
		if s, ok := m[msg.ID]; ok {
			ctx = trace.ContextWithSpan(ctx, s)
		}
	}
	return obs.WithCausation(ctx, msg.ID)
}
