package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/broker/idemjetstream/embedded"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
	"github.com/idemkit/idem/store/sqlstore"
)

// jetStream returns the run's JetStream: cfg.NATS, or an embedded server
// started on first use.
func (e *Env) jetStream() (natsjs.JetStream, error) {
	e.jsOnce.Do(func() {
		url := e.cfg.NATS
		if url == "" {
			srv, err := embedded.Start(embedded.Config{})
			if err != nil {
				e.jsErr = err
				return
			}
			e.closers = append(e.closers, srv.Close)
			url = srv.ClientURL()
		}
		nc, js, err := idemjetstream.Dial(url, nats.Name("idem-bench"))
		if err != nil {
			e.jsErr = err
			return
		}
		e.closers = append(e.closers, func() error { nc.Close(); return nil })
		e.js = js
	})
	return e.js, e.jsErr
}

// stream creates a fresh stream for one round and returns its subject;
// the stream is deleted when the run closes.
func (e *Env) stream(ctx context.Context, prefix string) (subject string, err error) {
	js, err := e.jetStream()
	if err != nil {
		return "", err
	}
	name := strings.ToUpper(e.name("BENCH_" + e.runID + "_" + prefix))
	subject = strings.ToLower(strings.ReplaceAll(name, "_", "."))
	if _, err := idemjetstream.EnsureStream(ctx, js, natsjs.StreamConfig{Name: name, Subjects: []string{subject}}); err != nil {
		return "", err
	}
	e.closers = append(e.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, natsjs.ErrStreamNotFound) {
			return err
		}
		return nil
	})
	return subject, nil
}

// subscriber returns a durable pull subscriber on subject's stream.
func (e *Env) subscriber(ctx context.Context, subject string) (*idemjetstream.Subscriber, error) {
	js, err := e.jetStream()
	if err != nil {
		return nil, err
	}
	stream := strings.ToUpper(strings.ReplaceAll(subject, ".", "_"))
	return idemjetstream.NewSubscriber(ctx, js, idemjetstream.SubscriberConfig{Stream: stream, Durable: "bench", MaxAckPending: 4 * batchSize})
}

// publisher returns a JetStream publisher.
func (e *Env) publisher() (*idemjetstream.Publisher, error) {
	js, err := e.jetStream()
	if err != nil {
		return nil, err
	}
	return idemjetstream.NewPublisher(js, idemjetstream.PublisherConfig{})
}

// streamPublisher returns a fresh stream's subject (see stream) and a
// publisher.
func (e *Env) streamPublisher(ctx context.Context, prefix string) (string, *idemjetstream.Publisher, error) {
	topic, err := e.stream(ctx, prefix)
	if err != nil {
		return "", nil, err
	}
	pub, err := e.publisher()
	return topic, pub, err
}

// sqliteNS returns an SQLite driver on the run's database whose idem
// tables carry a fresh prefix, migrated: each broker pair gets an outbox
// and inbox of its own, so no pair's leftovers reach another's relay.
func (e *Env) sqliteNS(ctx context.Context) (*sqlstore.Driver, error) {
	d, err := sqlstore.New(e.sqlite.DB(), sqlstore.Config{Names: store.Names{Prefix: e.name("ns") + "_"}})
	if err != nil {
		return nil, err
	}
	return d, migrate.Up(ctx, d)
}

// pgxNS is sqliteNS for PostgreSQL through pgx: a fresh schema
// <run schema>_<n>, dropped at Close.
func (e *Env) pgxNS(ctx context.Context) (*pgxstore.Driver, error) {
	schema := e.name(e.schema)
	e.extraSchemas = append(e.extraSchemas, schema)
	d, err := pgxstore.New(e.pg.PgxPool(), pgxstore.Config{Names: store.Names{Schema: schema}})
	if err != nil {
		return nil, err
	}
	return d, migrate.Up(ctx, d)
}

// sqlPostgres returns the run's database/sql handle on PostgreSQL (pgx
// stdlib, search_path = the run's schema), opened on first use.
func (e *Env) sqlPostgres() (*sql.DB, error) {
	e.sqlOnce.Do(func() {
		d, err := sqlstore.OpenPostgres(context.Background(), e.pgConn, sqlstore.Config{Names: store.Names{Schema: e.schema}})
		if err != nil {
			e.sqlErr = err
			return
		}
		d.DB().SetMaxOpenConns(24)
		d.DB().SetMaxIdleConns(24)
		e.closers = append(e.closers, d.Close)
		e.sqlDB = d.DB()
	})
	return e.sqlDB, e.sqlErr
}

// sqlPgNS is pgxNS through database/sql (the driver stack Watermill uses).
func (e *Env) sqlPgNS(ctx context.Context) (*sqlstore.Driver, error) {
	db, err := e.sqlPostgres()
	if err != nil {
		return nil, err
	}
	schema := e.name(e.schema)
	e.extraSchemas = append(e.extraSchemas, schema)
	d, err := sqlstore.New(db, sqlstore.Config{Dialect: store.Postgres, Names: store.Names{Schema: schema}})
	if err != nil {
		return nil, err
	}
	return d, migrate.Up(ctx, d)
}

// batchConsumer is idem's consumer runtime in batch mode: consumerWorkers
// fetch loops on one durable consumer, each fetching up to batchSize
// deliveries, recording them and applying the new ones in one transaction
// (inbox.ProcessBatchWithTx: bh once for the batch when set, else h for
// each message), committing, and only then acking them.
type batchConsumer[TTx any] struct {
	d        store.Driver[TTx]
	in       *inbox.Inbox[TTx]
	sub      broker.Subscriber
	consumer string
	h        inbox.Handler[TTx]
	bh       inbox.BatchHandler[TTx]
}

// consumerWorkers is how many fetch loops share one durable consumer.
const consumerWorkers = 2

// run consumes until ctx is done.
func (c *batchConsumer[TTx]) run(ctx context.Context) error {
	cons, err := consumer.New(c.in, c.sub, consumer.Config[TTx]{
		Name: c.consumer, Handler: c.h, BatchHandler: c.bh, Concurrency: consumerWorkers, BatchSize: batchSize,
		FetchWait: 50 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	return cons.Run(ctx)
}

// ackAll acks deliveries as the consumer runtime does for a batch: with
// one AckBatch when sub is a broker.BatchAcker, else concurrently (each
// Ack waits for the server's confirmation).
func ackAll(ctx context.Context, sub broker.Subscriber, ds []broker.Delivery) error {
	if ba, ok := sub.(broker.BatchAcker); ok {
		return ba.AckBatch(ctx, ds)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(ds))
	for i, d := range ds {
		wg.Go(func() { errs[i] = d.Ack(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitRows polls table until it holds n rows and returns when it did;
// it fails if the table holds more (a duplicate effect) or if errc
// reports a component failure first.
func waitRows[TTx any](ctx context.Context, d store.Driver[TTx], table string, n int, errc <-chan error) error {
	for {
		got, err := countRows(ctx, d, table)
		if err != nil {
			return err
		}
		if got == n {
			return nil
		}
		if got > n {
			return fmt.Errorf("%s holds %d rows for %d events: an effect was applied twice", table, got, n)
		}
		select {
		case err := <-errc:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}
