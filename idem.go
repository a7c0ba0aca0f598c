// Package idem makes side effects happen once in systems that deliver twice.
//
// Networks lose responses, brokers redeliver, clients retry and operators
// replay: duplicate delivery is normal, duplicate side effects are the bug.
// idem turns at-least-once delivery into effectively-once processing by
// recording every dedup decision through a unique constraint in the caller's
// own database transaction.
//
// A service makes its dedup decisions in its own transactions and runs its
// background parts together:
//
//	d, err := pgxstore.New(pool, pgxstore.Config{}) // or sqlstore.OpenSQLite: *sql.Tx
//	if err := migrate.Up(ctx, d); err != nil { … }
//	mw, err := idemhttp.New(d, idemhttp.Config{Tenant: tenantOf}) // POST /orders under Idempotency-Key
//	ob, err := outbox.New(d, outbox.Config{Source: "/shop"})       // events written with the order
//	relay, err := outbox.NewRelay(d, pub, outbox.RelayConfig{})    // … and published after the commit
//	ledger, err := effect.New(d, effect.Config{}) // worker: effect.NewWorker(ledger, …), a Performer per kind
//	ib, err := inbox.New(d, inbox.Config{})
//	billing, err := consumer.New(d, ib, sub, consumer.Config[pgx.Tx]{
//		Name: "billing",
//		Handler: func(ctx context.Context, tx pgx.Tx, msg idem.Message) error {
//			if !valid(msg.Payload) {
//				return idem.Permanent(errors.New("no order id")) // dead-lettered at once, never retried
//			}
//			_, _, err := ledger.ScheduleTx(ctx, tx, effect.Effect{Key: "charge:" + msg.Key, Kind: "charge", Payload: msg.Payload})
//			return err // the charge is made once, by an effect.Worker, under its key
//		},
//	})
//	gc, err := retention.New(d, retention.Config{})
//	err = idem.Run(ctx, relay, billing, worker, gc) // the first error stops them all
//
// The root package holds the shared vocabulary used by every part:
// message identity ([Message]), payload fingerprints ([Fingerprint],
// [CanonicalJSON]), typed errors ([ErrDuplicate], [ErrFingerprintMismatch], …)
// and the retry classification ([Permanent], [IsPermanent], [IsRetryable]).
//
// The core module, github.com/idemkit/idem (its dependencies: pgx and the
// OpenTelemetry API; a program on SQLite links modernc.org/sqlite with
// import _ "modernc.org/sqlite"):
//
//   - idem: messages, fingerprints over canonical JSON, typed errors, the
//     retry classification, [Run]
//   - store: the storage seam; store/pgxstore (PostgreSQL on pgx v5, the
//     production store) and store/sqlstore (database/sql: SQLite through
//     modernc.org/sqlite, PostgreSQL through pgx's stdlib adapter)
//   - migrate: embedded, versioned schema migrations of every table
//   - idemhttp: the Idempotency-Key middleware, transactional and two-phase
//   - inbox: the idempotent consumer, one message or a batch per transaction
//   - outbox: the transactional outbox and its relay
//   - broker: the broker seam; broker/memory, an in-process broker with
//     fault injection; broker/brokertest, the adapters' conformance suite
//   - consumer: the consumer runtime (ack after commit, backoff, dead
//     letters); consumer/retrytopic, non-blocking retry topics;
//     consumer/consumertest, the runtime's conformance suite per broker
//   - dlq: the dead-letter store, redrive and discard
//   - effect: the ledger of external side effects and its worker
//   - saga: sagas whose actions and compensations are effects
//   - webhook: webhook receivers (Standard Webhooks, GitHub, Stripe)
//   - versionguard: version-guarded writes for out-of-order events
//   - retention: the garbage collector of expired records
//   - horizon: declared replay horizons and their weakest link
//   - idemtest: effectively-once checks of a team's own handlers in go test
//
// Prometheus metrics for every part are in idemmetrics.
//
// Modules of their own, so that a service pulls in only the client it uses
// (each requires the core):
//
//   - github.com/idemkit/idem/broker/idemjetstream: NATS JetStream, and an
//     embedded server (idemjetstream/embedded)
//   - github.com/idemkit/idem/broker/idemkafka: Apache Kafka (franz-go)
//   - github.com/idemkit/idem/broker/idemamqp: RabbitMQ (amqp091-go)
//   - github.com/idemkit/idem/store/idemmysql: MySQL and MariaDB
//     (go-sql-driver/mysql), with idemmysqltest for tests
//   - github.com/idemkit/idem/cmd/idem: the idem command (drill, demo,
//     bench, migrate, gc, dlq, console, proxy, conform…) and the packages
//     only it uses: the reference system (boxoffice), the console, the
//     reverse proxy (idemproxy) and the contract prober (conform)
//
// Every API documents what happens on crash, retry and duplicate.
package idem
