// Package boxoffice is idem's reference system: a ticket box office (the
// running example of the design notes idem was built from; those notes are
// not part of this repository, and this package is the complete
// description of the system), assembled only from idem's public APIs, run
// by "idem demo" and proven under faults by "idem drill".
//
// The flow, and the idem part guarding each hop:
//
//	POST /orders ──(idemhttp, transactional)──▶ orders + event_inventory + outbox row (one tx)
//	outbox relay ──(outbox: claim, publish with the event id as Nats-Msg-Id, mark)──▶ order-events
//	order-events ──(inbox "notification")──▶ outgoing_emails (UNIQUE order_id, kind) + effect scheduled
//	effect worker ──(effect ledger, key order-confirmed-email:<id>)──▶ e-mail provider (Idempotency-Key)
//	order-events ──(inbox "billing", business key invoice:<id>)──▶ invoices (UNIQUE order_id)
//	order-events ──(inbox "search" + versionguard)──▶ event_availability (seats left per event)
//	invalid events ──▶ dead-letter store (dlq), redriven with their original id
//	POST /webhooks/payments ──(webhook: Standard Webhooks signature + receipt dedup)──▶ payments, orders.status = paid
//	POST /paid-orders ──(saga "paid-order" on the effect ledger)──▶ reserve seats → charge (payment provider) → confirm; compensated: release, refund
//
// A [System] runs any subset of the components ([Role]) in one process, on
// one database and one [Broker]; many processes may share the database and
// broker ("idem drill --processes"). The System is generic over the
// driver's transaction type, as idem's own packages are: [New] takes any
// store.Driver (pgx's pgx.Tx, database/sql's *sql.Tx); [Open] picks the
// driver from the database URL (pgx for PostgreSQL, database/sql for
// SQLite) and erases its transaction type.
//
// Hostile and bad input: client input is validated before it reaches the
// database (tenant, order body, order ids, payment order ids; a malformed
// order id is simply not found), so it answers 4xx problem+json and never a
// database error; a 500 carries a fixed detail and the cause goes to the
// log. Order bodies above [MaxOrderBody] answer 413. Events from the broker
// are held to the same rules ([DecodeOrderConfirmed]) and dead-lettered
// otherwise. Serve [System.Handler] with timeouts (idem demo does). The
// business tables live in idem's PostgreSQL schema, apart from the
// application's own ([Migrate]).
package boxoffice

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemmetrics"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/fakeprovider"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/saga"
	"github.com/idemkit/idem/store"
)

// Role is one component of the system.
type Role string

// The roles. A System with no roles configured runs all of them.
const (
	RoleAPI          Role = "api"          // the HTTP API (orders, webhook, stats)
	RoleRelay        Role = "relay"        // the outbox relay
	RoleNotification Role = "notification" // the notification consumer
	RoleBilling      Role = "billing"      // the billing consumer
	RoleSearch       Role = "search"       // the search consumer
	RoleEffects      Role = "effects"      // the effect worker (e-mail sender)
)

// AllRoles lists every role.
var AllRoles = []Role{RoleAPI, RoleRelay, RoleNotification, RoleBilling, RoleSearch, RoleEffects}

// ParseRole validates a role name.
func ParseRole(s string) (Role, error) {
	for _, r := range AllRoles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", checks.Optionf("boxoffice: unknown role %q (want one of api, relay, notification, billing, search, effects)", s)
}

// Hooks let drills inject faults into the real components. All are
// optional; production leaves them nil.
type Hooks struct {
	// WrapPublisher wraps the relay's publisher (double publish, lost acks,
	// reordering).
	WrapPublisher func(broker.Publisher) broker.Publisher
	// WrapSubscriber wraps a consumer's subscriber (lost acks = a crash
	// between commit and ack; duplicate deliveries).
	WrapSubscriber func(consumer string, s broker.Subscriber) broker.Subscriber
	// WrapPerformer wraps the e-mail performer (crash after the provider
	// call, time-outs).
	WrapPerformer func(effect.Performer) effect.Performer
	// Fault runs first in every consumer handler, inside its transaction;
	// an error fails the delivery (transient, or idem.Permanent → DLQ).
	Fault func(consumer string, oc OrderConfirmed, msg idem.Message) error
	// WrapSagaStep wraps the external halves of the paid-order saga's
	// steps ("charge" do and undo): crashes after the provider call,
	// time-outs.
	WrapSagaStep func(step string, op saga.Op, f SagaStep) SagaStep
	// Enqueued runs after an order's OrderConfirmed event is enqueued,
	// inside the order's transaction (which may still roll back), with
	// the event as stored (ID and Source filled in): the drill's record
	// of which events exist, for its projection report.
	Enqueued func(oc OrderConfirmed, ev outbox.Event)
}

// Config configures a System (its database is [New]'s argument).
type Config struct {
	// Broker carries order-events. Required unless the roles are API only.
	Broker Broker
	// Subject is the order subject. Defaults to "order-events".
	Subject string
	// ProviderURL is the e-mail provider's base URL (fakeprovider API).
	// Required with RoleEffects.
	ProviderURL string
	// WebhookSecrets verify POST /webhooks/payments (Standard Webhooks,
	// "whsec_…"; several for rotation). Required with RoleAPI.
	WebhookSecrets []string
	// Seats is the capacity of every event. Defaults to 1,000,000.
	Seats int64
	// Roles are the components this process runs. Defaults to all.
	Roles []Role
	// DurableSuffix is appended to each consumer's durable subscription
	// name (the inbox scope stays the consumer name): instances with
	// different suffixes each receive every message, as two deployments of
	// one consumer reading the same stream would. Defaults to "".
	DurableSuffix string
	// Relays is the number of relay instances with RoleRelay. Defaults to 1.
	Relays int
	// ConsumerInstances is the number of instances of each consumer role
	// in this process (they share the durable subscription). Defaults to 1.
	ConsumerInstances int
	// Batch is the most deliveries a consumer fetches at once. Defaults
	// to 64.
	Batch int
	// MaxAttempts is how many deliveries a failing message gets before it
	// is dead-lettered. Defaults to 5.
	MaxAttempts int
	// RetryBase and RetryMax bound the full-jitter backoff before a failed
	// message is redelivered. Default to 50ms and 2s.
	RetryBase, RetryMax time.Duration
	// PollInterval is the relay's and effect worker's idle poll.
	// Defaults to 100ms.
	PollInterval time.Duration
	// EffectLease is the effect ledger's lease (a crashed worker's call is
	// re-sent after it). Defaults to 10s.
	EffectLease time.Duration
	// EffectCallTimeout bounds one provider call. Defaults to EffectLease/2.
	EffectCallTimeout time.Duration
	// EffectConcurrency is the e-mail worker's most provider calls in
	// flight, and so the most e-mails one claim leases and one batch of
	// completions records. Defaults to 128 (see the effect worker's
	// comment in effects.go for why so many).
	EffectConcurrency int
	// RelayClaimTTL is the relay's claim lease. Defaults to 10s.
	RelayClaimTTL time.Duration
	// KeyRetention is how long an Idempotency-Key answers for itself.
	// Defaults to 24h.
	KeyRetention time.Duration
	// InboxRetention is how long the consumers remember a message id.
	// Defaults to 7 days.
	InboxRetention time.Duration
	// Now is the clock of the business rows and idem records. Defaults to
	// time.Now.
	Now func() time.Time
	// Registry receives the Prometheus metrics served on /metrics.
	// Defaults to a new registry.
	Registry *prometheus.Registry
	// Hooks inject faults (drills only).
	Hooks Hooks
	// Logger receives the system's logs. Defaults to discarding. Records
	// logged while a span is active carry trace_id and span_id.
	Logger *slog.Logger
	// TracerProvider supplies the tracer of every component (idem.http,
	// idem.outbox.enqueue, idem.relay.publish, idem.consume,
	// idem.effect.call, idem.webhook): one POST /orders is one trace from
	// the request to the provider call. Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

// System is the box office: its HTTP API and its background components
// (relay, consumers, effect worker). Create it with [New] or [Open], run the
// background components with [System.Run] or [System.Start], serve
// [System.Handler]. Safe for concurrent use.
type System[TTx any] struct {
	cfg      Config
	db       store.Driver[TTx]
	t        tables // where the business tables are
	log      *slog.Logger
	now      func() time.Time
	roles    map[Role]bool
	outbox   *outbox.Outbox[TTx]
	inbox    *inbox.Inbox[TTx]
	dlq      *dlq.Store[TTx]
	ledger   *effect.Ledger[TTx]
	sagas    *saga.Sagas[TTx] // the paid-order saga (paid.go)
	hs       *Handlers[TTx]
	reg      *prometheus.Registry
	metrics  *idemmetrics.Metrics
	handler  http.Handler
	counts   counters
	provider *fakeprovider.Provider // set by Open when it started one
	natsURL  string

	mu      sync.Mutex // protects cancel, done, closers
	cancel  context.CancelFunc
	done    chan error
	closers []func() error // resources Open created, closed by Close
}

// counters are this process's duplicate suppressions per component.
type counters struct {
	http, webhook, brokerDup, effects atomic.Int64
	guardStale                        atomic.Int64
}

// New builds a System on db and cfg's broker (which the caller keeps
// owning) and migrates the database: idem's tables and the business tables.
// TTx is db's transaction type (pgx.Tx with store/pgxstore, *sql.Tx with
// store/sqlstore); the consumers' handlers and the *Tx methods take it.
func New[TTx any](ctx context.Context, db store.Driver[TTx], cfg Config) (*System[TTx], error) {
	if db == nil {
		return nil, checks.Optionf("boxoffice: the database driver is required")
	}
	if len(cfg.Roles) == 0 {
		cfg.Roles = AllRoles
	}
	roles := map[Role]bool{}
	for _, r := range cfg.Roles {
		if _, err := ParseRole(string(r)); err != nil {
			return nil, err
		}
		roles[r] = true
	}
	cfg.Subject = cmp.Or(cfg.Subject, Subject)
	cfg.Seats = cmp.Or(cfg.Seats, 1_000_000)
	cfg.Relays = cmp.Or(cfg.Relays, 1)
	cfg.ConsumerInstances = cmp.Or(cfg.ConsumerInstances, 1)
	cfg.Batch = cmp.Or(cfg.Batch, 64)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, 5)
	cfg.RetryBase = cmp.Or(cfg.RetryBase, 50*time.Millisecond)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, 2*time.Second)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 100*time.Millisecond)
	cfg.EffectLease = cmp.Or(cfg.EffectLease, 10*time.Second)
	cfg.EffectCallTimeout = cmp.Or(cfg.EffectCallTimeout, cfg.EffectLease/2)
	cfg.EffectConcurrency = cmp.Or(cfg.EffectConcurrency, defaultEffectConcurrency)
	cfg.RelayClaimTTL = cmp.Or(cfg.RelayClaimTTL, 10*time.Second)
	cfg.KeyRetention = cmp.Or(cfg.KeyRetention, 24*time.Hour)
	cfg.InboxRetention = cmp.Or(cfg.InboxRetention, 7*24*time.Hour)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	switch {
	case cfg.Seats < 0 || cfg.Relays < 0 || cfg.ConsumerInstances < 0 || cfg.Batch < 0 || cfg.MaxAttempts < 0 || cfg.EffectConcurrency < 0:
		return nil, checks.Optionf("boxoffice: negative Seats, Relays, ConsumerInstances, Batch, MaxAttempts or EffectConcurrency")
	case cfg.Broker == nil && (roles[RoleRelay] || roles[RoleNotification] || roles[RoleBilling] || roles[RoleSearch]):
		return nil, checks.Optionf("boxoffice: Config.Broker is required for the relay and the consumers")
	case cfg.ProviderURL == "" && roles[RoleEffects]:
		return nil, checks.Optionf("boxoffice: Config.ProviderURL is required for the effect worker")
	case len(cfg.WebhookSecrets) == 0 && roles[RoleAPI]:
		return nil, checks.Optionf("boxoffice: Config.WebhookSecrets is required for the API")
	}
	if err := migrate.Up(ctx, db); err != nil {
		return nil, fmt.Errorf("boxoffice: migrate idem tables: %w", err)
	}
	if err := Migrate(ctx, db); err != nil {
		return nil, err
	}
	s := &System[TTx]{cfg: cfg, db: db, t: tablesFor(db), log: cfg.Logger.With("component", "boxoffice"), now: cfg.Now, roles: roles, reg: cfg.Registry}
	var err error
	if s.metrics, err = idemmetrics.New(s.reg, idemmetrics.Options{}); err != nil {
		return nil, fmt.Errorf("boxoffice: metrics: %w", err)
	}
	if err := s.reg.Register(idemmetrics.NewDBCollector(s.db, idemmetrics.DBConfig{})); err != nil {
		return nil, fmt.Errorf("boxoffice: metrics: %w", err)
	}
	if s.outbox, err = outbox.New(s.db, outbox.Config{Source: "boxoffice/orders", Now: cfg.Now, Logger: cfg.Logger, TracerProvider: cfg.TracerProvider}); err != nil {
		return nil, err
	}
	if s.inbox, err = inbox.New(s.db, inbox.Config{Retention: cfg.InboxRetention, Now: cfg.Now, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	if s.dlq, err = dlq.New(s.db, dlq.Config{Now: cfg.Now, Logger: cfg.Logger, InboxRetention: s.inbox.RetentionOf}); err != nil {
		return nil, err
	}
	if s.ledger, err = effect.New(s.db, effect.Config{Lease: cfg.EffectLease, CallTimeout: cfg.EffectCallTimeout, Now: cfg.Now, Logger: cfg.Logger,
		TracerProvider: cfg.TracerProvider}); err != nil {
		return nil, err
	}
	if s.sagas, err = s.newSagas(); err != nil {
		return nil, err
	}
	s.hs = &Handlers[TTx]{db: s.db, t: s.t, ledger: s.ledger, now: cfg.Now, Fault: cfg.Hooks.Fault, stale: &s.counts.guardStale}
	if roles[RoleAPI] {
		if s.handler, err = s.routes(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// routes builds the HTTP API.
func (s *System[TTx]) routes() (http.Handler, error) {
	mw, err := idemhttp.New(s.db, idemhttp.Config{
		Tenant:    func(r *http.Request) (string, error) { return tenantOf(r), nil },
		Retention: s.cfg.KeyRetention,
		// The order body limit, enforced before the key is recorded: any
		// larger body answers 413, never 400.
		MaxBodyBytes:   MaxOrderBody,
		Now:            s.cfg.Now,
		Logger:         s.cfg.Logger,
		TracerProvider: s.cfg.TracerProvider,
	})
	if err != nil {
		return nil, err
	}
	wh, err := s.webhookHandler()
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", withTenant(s.countReplays(mw.Handler(http.HandlerFunc(s.createOrder)))))
	mux.Handle("GET /orders/{id}", withTenant(http.HandlerFunc(s.getOrder)))
	mux.Handle("POST /paid-orders", withTenant(http.HandlerFunc(s.createPaidOrder)))
	mux.Handle("GET /paid-orders/{id}", withTenant(http.HandlerFunc(s.getPaidOrderHandler)))
	mux.Handle("POST /paid-orders/{id}/cancel", withTenant(http.HandlerFunc(s.cancelPaidOrder)))
	mux.Handle("POST /webhooks/payments", wh)
	mux.HandleFunc("GET /stats", s.statsHandler)
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	return mux, nil
}

// countReplays counts responses the middleware replayed.
func (s *System[TTx]) countReplays(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&replaySpy{ResponseWriter: w, n: &s.counts.http}, r)
	})
}

type replaySpy struct {
	http.ResponseWriter
	n    *atomic.Int64
	done bool
}

func (w *replaySpy) WriteHeader(code int) {
	if !w.done {
		w.done = true
		if w.Header().Get("Idempotent-Replayed") == "true" {
			w.n.Add(1)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *replaySpy) Write(p []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

func (w *replaySpy) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// StaleUpdates returns how many out-of-order availability updates this
// process's search consumer discarded through the version guard.
func (s *System[TTx]) StaleUpdates() int64 { return s.counts.guardStale.Load() }

// Handler returns the HTTP API (nil without RoleAPI).
func (s *System[TTx]) Handler() http.Handler { return s.handler }

// Handlers returns the system's consumer handlers, for running them
// outside the system's own consumers (idemtest.Inbox in its tests).
func (s *System[TTx]) Handlers() *Handlers[TTx] { return s.hs }

// DB returns the system's database driver.
func (s *System[TTx]) DB() store.Driver[TTx] { return s.db }

// DeadLetters returns the dead-letter store.
func (s *System[TTx]) DeadLetters() *dlq.Store[TTx] { return s.dlq }

// Ledger returns the effect ledger.
func (s *System[TTx]) Ledger() *effect.Ledger[TTx] { return s.ledger }

// Registry returns the Prometheus registry behind /metrics.
func (s *System[TTx]) Registry() *prometheus.Registry { return s.reg }

// Config returns the system's configuration with defaults applied.
func (s *System[TTx]) Config() Config { return s.cfg }

// Run runs the background components of the configured roles (relays,
// consumers, effect worker) until ctx ends, then waits for them to stop and
// returns nil; it returns early with an error if a component fails to start.
func (s *System[TTx]) Run(ctx context.Context) error {
	var runners []func(context.Context) error
	var closers []func() error
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()
	if s.roles[RoleRelay] {
		for i := range s.cfg.Relays {
			pub, err := s.cfg.Broker.Publisher()
			if err != nil {
				return fmt.Errorf("boxoffice: relay publisher: %w", err)
			}
			closers = append(closers, pub.Close)
			pub = &dupCounter{Publisher: pub, n: &s.counts.brokerDup}
			if s.cfg.Hooks.WrapPublisher != nil {
				pub = s.cfg.Hooks.WrapPublisher(pub)
			}
			r, err := outbox.NewRelay(s.db, pub, outbox.RelayConfig{
				Name:            fmt.Sprintf("boxoffice-relay-%d-%d", i, time.Now().UnixNano()),
				PollInterval:    s.cfg.PollInterval,
				ClaimTTL:        s.cfg.RelayClaimTTL,
				DuplicateWindow: s.duplicateWindow(),
				Now:             s.cfg.Now,
				Logger:          s.cfg.Logger,
				TracerProvider:  s.cfg.TracerProvider,
			})
			if err != nil {
				return err
			}
			runners = append(runners, r.Run)
		}
	}
	for _, c := range []struct {
		role Role
		name string
		h    inbox.Handler[TTx]
	}{
		{RoleNotification, ConsumerNotification, s.hs.Notification},
		{RoleBilling, ConsumerBilling, s.hs.Billing},
		{RoleSearch, ConsumerSearch, s.hs.Search},
	} {
		if !s.roles[c.role] {
			continue
		}
		for range s.cfg.ConsumerInstances {
			sub, err := s.cfg.Broker.Subscriber(ctx, c.name+s.cfg.DurableSuffix)
			if err != nil {
				if ctx.Err() != nil {
					return nil // stopped while starting: a clean stop, like one after start
				}
				return fmt.Errorf("boxoffice: %s subscriber: %w", c.name, err)
			}
			closers = append(closers, sub.Close)
			if s.cfg.Hooks.WrapSubscriber != nil {
				sub = s.cfg.Hooks.WrapSubscriber(c.name, sub)
			}
			run, err := s.consumerRunner(c.name, sub, c.h)
			if err != nil {
				return fmt.Errorf("boxoffice: %s consumer: %w", c.name, err)
			}
			runners = append(runners, run)
		}
	}
	if s.roles[RoleEffects] {
		w, err := s.effectWorker()
		if err != nil {
			return err
		}
		runners = append(runners, w.Run)
		sw, err := s.sagaWorker()
		if err != nil {
			return err
		}
		runners = append(runners, sw.Run)
	}
	if len(runners) == 0 {
		<-ctx.Done()
		return nil
	}
	// The parts run under idem's one runner, as a service of idem's would:
	// the first error stops the others, and the stop is bounded.
	svc := idem.Service{Logger: s.log}
	for _, run := range runners {
		svc.Runners = append(svc.Runners, idem.RunFunc(run))
	}
	return svc.Run(ctx)
}

// Start runs [System.Run] in the background until [System.Close].
func (s *System[TTx]) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return errors.New("boxoffice: already started")
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	done := make(chan error, 1)
	s.done = done
	go func() { done <- s.Run(ctx) }()
	return nil
}

// Stop stops what Start started and waits for it; it returns Run's error.
// The system may be started again.
func (s *System[TTx]) Stop() error {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel, s.done = nil, nil
	s.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	return <-done
}

// Close stops the background components and releases what [Open] created
// (servers, database, broker). It is safe to call more than once.
func (s *System[TTx]) Close() error {
	err := s.Stop()
	s.mu.Lock()
	closers := s.closers
	s.closers = nil
	s.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		err = errors.Join(err, closers[i]())
	}
	return err
}

// dupCounter counts the publishes a broker reported as duplicates.
type dupCounter struct {
	broker.Publisher
	n *atomic.Int64
}

func (p *dupCounter) Publish(ctx context.Context, msgs ...idem.Message) error {
	rp, ok := p.Publisher.(broker.ResultPublisher)
	if !ok {
		return p.Publisher.Publish(ctx, msgs...)
	}
	res, err := rp.PublishResults(ctx, msgs...)
	for _, r := range res {
		if r.Duplicate {
			p.n.Add(1)
		}
	}
	return err
}
