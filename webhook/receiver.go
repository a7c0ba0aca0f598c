package webhook

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/obs"
	p "github.com/idemkit/idem/internal/problem"
	"github.com/idemkit/idem/store"
)

// EnqueueFunc enqueues the work of a new delivery inside tx: write an
// outbox event, schedule an effect, or insert a job row. It runs only for
// the first delivery of (source, delivery id), in the transaction that
// records the receipt; an error rolls both back.
type EnqueueFunc[TTx any] func(ctx context.Context, tx TTx, d Delivery, body []byte) error

// ReceiverConfig configures a Receiver.
type ReceiverConfig[TTx any] struct {
	// Source names the sender ("github", "stripe", "billing-provider"); the
	// inbox consumer is "webhook:"+Source, so delivery ids of different
	// sources never collide. Required.
	Source string
	// Verifier authenticates each delivery. Required.
	Verifier Verifier
	// EnqueueTx records the work of a new delivery. Required.
	EnqueueTx EnqueueFunc[TTx]
	// MaxBodyBytes caps the body; larger bodies get 413 and are not read
	// further. Defaults to 1 MiB.
	MaxBodyBytes int64
	// Now returns the current time for the timestamp tolerance. Defaults to
	// time.Now.
	Now func() time.Time
	// Logger receives one line per rejected or failed delivery. Defaults to
	// slog.Default(). Records logged while a span is active carry trace_id and
	// span_id.
	Logger *slog.Logger
	// TracerProvider supplies the tracer of the idem.webhook span.
	// Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Observer, if set, counts accepted deliveries (Processed), replays
	// (DuplicateContext, component "webhook") and delivery ids reused with
	// another body (FingerprintConflict), all under the consumer name
	// "webhook:"+Source; pass an *idemmetrics.Metrics.
	Observer idem.Observer
}

// Receiver is an http.Handler receiving one source's webhooks. It is safe
// for concurrent use.
//
// For each POST:
//
//  1. the body is read up to MaxBodyBytes (413 above it);
//  2. the Verifier authenticates it (401 on failure; 400 when the delivery
//     is authentic but has no id); nothing is recorded before this;
//  3. in one transaction, the inbox records (webhook:<source>, delivery id)
//     and, for a first delivery only, Enqueue runs; then it commits;
//  4. a first delivery answers 202, a replay 200, both with a small JSON
//     body {"status":"accepted"|"duplicate","delivery_id":…}.
//
// Crash or error before the commit: nothing is recorded, the answer is 5xx
// and the sender's retry is processed as a first delivery. A panic of
// EnqueueTx is such an error: the inbox recovers it (logging its stack on
// the inbox's Logger), the transaction rolls back and the answer is 503
// with Retry-After. Crash after the
// commit but before the answer: the sender retries and gets 200 with no
// second enqueue. Concurrent replays block on the inbox's unique key and
// then answer 200. The same delivery id with a different body (signed by
// the sender) is refused with 422 and nothing is enqueued: a reused id with
// a different payload fails loudly, it is never taken for a replay and
// silently skipped (the inbox compares the stored payload fingerprint on
// every duplicate).
// Errors are RFC 9457 problem+json.
type Receiver[TTx any] struct {
	d   store.Driver[TTx]
	ib  *inbox.Inbox[TTx]
	cfg ReceiverConfig[TTx]
	log *slog.Logger
	tr  trace.Tracer
}

// NewReceiver returns a Receiver recording receipts in ib (in transactions
// of ib's driver).
func NewReceiver[TTx any](ib *inbox.Inbox[TTx], cfg ReceiverConfig[TTx]) (*Receiver[TTx], error) {
	switch {
	case ib == nil:
		return nil, checks.Optionf("webhook: NewReceiver needs an inbox")
	case cfg.Verifier == nil:
		return nil, checks.Optionf("webhook: Verifier is required")
	case cfg.EnqueueTx == nil:
		return nil, checks.Optionf("webhook: EnqueueTx is required")
	case cfg.MaxBodyBytes < 0:
		return nil, checks.Optionf("webhook: negative MaxBodyBytes")
	}
	if err := checks.ID("webhook:" + cfg.Source); err != nil || cfg.Source == "" {
		return nil, checks.Optionf("webhook: Source %q must be a non-empty printable name", cfg.Source)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Observer = obs.Observer(cfg.Observer)
	return &Receiver[TTx]{d: ib.Driver(), ib: ib, cfg: cfg, log: obs.Component(cmp.Or(cfg.Logger, slog.Default()), "webhook", "source", cfg.Source),
		tr: obs.Tracer(cfg.TracerProvider)}, nil
}

// Consumer returns the inbox consumer name of the receiver's receipts.
func (rc *Receiver[TTx]) Consumer() string { return "webhook:" + rc.cfg.Source }

// The values of the idem.decision attribute of the idem.webhook span.
const (
	decisionAccepted  = "accepted"  // a first delivery: recorded, Enqueue ran (202)
	decisionDuplicate = "duplicate" // a replay of a recorded delivery (200)
	decisionMismatch  = "mismatch"  // the delivery id came before with another body (422)
	decisionRejected  = "rejected"  // not POST, body too large or unreadable, not authentic, no or bad delivery id
	decisionFailed    = "failed"    // Enqueue refused it (422) or it could not be recorded (503)
)

// ServeHTTP implements http.Handler. Each POST runs in an idem.webhook
// span (a child of the span in the request's context, or of the
// traceparent the sender sent) with idem.source, idem.delivery_id and
// idem.decision.
func (rc *Receiver[TTx]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := obs.ExtractHTTP(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := rc.tr.Start(ctx, obs.SpanWebhook, trace.WithSpanKind(trace.SpanKindServer))
	decision, id, err := rc.serve(ctx, w, r.WithContext(ctx))
	if span.IsRecording() {
		span.SetAttributes(obs.AttrSource.String(rc.cfg.Source), obs.AttrDecision.String(decision))
		if id != "" {
			span.SetAttributes(obs.AttrDeliveryID.String(id))
		}
	}
	obs.End(span, err)
}

func (rc *Receiver[TTx]) serve(ctx context.Context, w http.ResponseWriter, r *http.Request) (decision, id string, _ error) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		problem(w, http.StatusMethodNotAllowed, "method not allowed", "webhooks are delivered with POST", 0)
		return decisionRejected, "", nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, rc.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			problem(w, http.StatusRequestEntityTooLarge, "payload too large", fmt.Sprintf("the body exceeds %d bytes", rc.cfg.MaxBodyBytes), 0)
			return decisionRejected, "", nil
		}
		problem(w, http.StatusBadRequest, "unreadable body", "the request body could not be read", 0)
		return decisionRejected, "", nil
	}
	d, err := rc.cfg.Verifier.Verify(r, body, rc.cfg.Now())
	if err != nil {
		if errors.Is(err, ErrMissingDeliveryID) {
			problem(w, http.StatusBadRequest, "missing delivery id", err.Error(), 0)
			return decisionRejected, "", nil
		}
		rc.log.WarnContext(ctx, "webhook rejected", "error", err)
		// The detail is generic on purpose: do not tell a forger which check failed.
		problem(w, http.StatusUnauthorized, "unauthenticated", "the webhook signature could not be verified", 0)
		return decisionRejected, "", nil
	}
	if err := checks.ID(d.ID); err != nil {
		problem(w, http.StatusBadRequest, "invalid delivery id", err.Error(), 0)
		return decisionRejected, "", nil
	}
	d.Source = rc.cfg.Source
	msg := idem.Message{ID: d.ID, Subject: rc.cfg.Source, Payload: body, Time: d.Timestamp}
	var res inbox.Result
	err = store.InTx(ctx, rc.d, func(tx TTx) error {
		var err error
		res, err = rc.ib.ProcessTx(ctx, tx, rc.Consumer(), msg, func(ctx context.Context, tx TTx, _ idem.Message) error {
			return rc.cfg.EnqueueTx(ctx, tx, d, body)
		})
		return err
	})
	switch {
	case err == nil:
	case errors.Is(err, idem.ErrFingerprintMismatch):
		rc.log.WarnContext(ctx, "delivery id reused with a different body", "delivery_id", d.ID, "error", err)
		rc.cfg.Observer.FingerprintConflict("webhook", rc.Consumer())
		problem(w, http.StatusUnprocessableEntity, "delivery id reused", "this delivery id was received before with a different body", 0)
		return decisionMismatch, d.ID, nil
	case idem.IsPermanent(err):
		rc.log.ErrorContext(ctx, "enqueue refused the delivery", "delivery_id", d.ID, "error", err)
		problem(w, http.StatusUnprocessableEntity, "unprocessable delivery", "the delivery cannot be processed", 0)
		return decisionFailed, d.ID, err
	default:
		rc.log.ErrorContext(ctx, "cannot record the delivery", "delivery_id", d.ID, "error", err)
		problem(w, http.StatusServiceUnavailable, "not recorded", "the delivery was not recorded; retry it", time.Second)
		return decisionFailed, d.ID, err
	}
	status, word := http.StatusAccepted, decisionAccepted
	if res == inbox.Duplicate {
		status, word = http.StatusOK, decisionDuplicate
		rc.cfg.Observer.DuplicateContext(ctx, "webhook", rc.Consumer())
	} else {
		rc.cfg.Observer.Processed(rc.Consumer())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"status": word, "delivery_id": d.ID})
	return word, d.ID, nil
}

// problem answers an RFC 9457 problem document (type about:blank), with
// Retry-After when retryAfter is positive.
func problem(w http.ResponseWriter, status int, title, detail string, retryAfter time.Duration) {
	p.Write(w, status, p.Details{Type: "about:blank", Title: title, Status: status, Detail: detail}, retryAfter)
}
