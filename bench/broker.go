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

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/jetstream"
	"github.com/idemkit/idem/broker/jetstream/embedded"
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
		nc, js, err := jetstream.Dial(url, nats.Name("idem-bench"))
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
	if _, err := jetstream.EnsureStream(ctx, js, natsjs.StreamConfig{Name: name, Subjects: []string{subject}}); err != nil {
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
func (e *Env) subscriber(ctx context.Context, subject string) (*jetstream.Subscriber, error) {
	js, err := e.jetStream()
	if err != nil {
		return nil, err
	}
	stream := strings.ToUpper(strings.ReplaceAll(subject, ".", "_"))
	return jetstream.NewSubscriber(ctx, js, jetstream.SubscriberConfig{Stream: stream, Durable: "bench", MaxAckPending: 4 * batchSize})
}

// publisher returns a JetStream publisher.
func (e *Env) publisher() (*jetstream.Publisher, error) {
	js, err := e.jetStream()
	if err != nil {
		return nil, err
	}
	return jetstream.NewPublisher(js, jetstream.PublisherConfig{})
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

// batchConsumer is an inbox consumer in batch mode: it fetches up to
// batchSize deliveries, records them and runs h for each in one
// transaction (inbox.ProcessBatchTx), commits, and only then acks them.
// A failing transaction naks the batch for redelivery.
type batchConsumer[TTx any] struct {
	d        store.Driver[TTx]
	in       *inbox.Inbox[TTx]
	sub      broker.Subscriber
	consumer string
	h        inbox.Handler[TTx]
}

// consumerWorkers is how many fetch loops share one durable consumer.
const consumerWorkers = 2

// run consumes with consumerWorkers concurrent loops until ctx is done; it
// returns the first error that is not ctx's.
func (c *batchConsumer[TTx]) run(ctx context.Context) error {
	errs := make([]error, consumerWorkers)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := range consumerWorkers {
		wg.Go(func() {
			if errs[i] = c.loop(ctx); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// loop is one fetch → transaction → commit → ack loop.
func (c *batchConsumer[TTx]) loop(ctx context.Context) error {
	for {
		ds, err := c.sub.Fetch(ctx, batchSize, 50*time.Millisecond)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if len(ds) == 0 {
			continue
		}
		msgs := make([]idem.Message, len(ds))
		for i, d := range ds {
			msgs[i] = d.Message()
		}
		var outs []inbox.Outcome
		err = store.InTx(ctx, c.d, func(tx TTx) error {
			outs, err = c.in.ProcessBatchTx(ctx, tx, c.consumer, msgs, c.h)
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("consumer batch: %w", err)
		}
		for i, o := range outs {
			if o.Err != nil {
				return fmt.Errorf("consumer: message %s: %w", msgs[i].ID, o.Err)
			}
		}
		if err := ackAll(ctx, ds); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// ackAll acks deliveries concurrently (each Ack waits for the server's
// confirmation).
func ackAll(ctx context.Context, ds []broker.Delivery) error {
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
