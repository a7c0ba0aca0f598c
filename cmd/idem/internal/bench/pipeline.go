package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
)

type sqlTx = sql.Tx

// pipelineProducers is the number of concurrent order producers of the
// pipeline pair.
const pipelineProducers = 4

// rowHandler is the consumers' business effect: one row per message.
func rowHandler[TTx any](d store.Driver[TTx], insert string) inbox.Handler[TTx] {
	return func(ctx context.Context, tx TTx, msg idem.Message) error {
		_, err := d.Tx(tx).Exec(ctx, insert, msg.ID, msg.Payload, store.Micros(time.Now()))
		return err
	}
}

// rowsHandler is rowHandler for a whole batch: one multi-row INSERT.
func rowsHandler[TTx any](d store.Driver[TTx], insert string) inbox.BatchHandler[TTx] {
	return func(ctx context.Context, tx TTx, msgs []idem.Message) error {
		return insertMany(ctx, d, tx, insert, msgs)
	}
}

// pipeline: order transaction (order row + outbox event) → relay →
// JetStream → inbox consumer in batch mode → business row, end to end,
// against the same flow without guarantees: order row committed, then
// published straight to JetStream (lost if the process dies in between),
// consumed by a batch consumer that inserts without an inbox (a
// redelivery would apply twice). Producers run for 70% of the budget; the
// side is timed until the last business row exists.
func pipeline[TTx any](e *Env, ns func(context.Context) (store.Driver[TTx], error), storeName string) Pair {
	var (
		d   store.Driver[TTx]
		ob  *outbox.Outbox[TTx]
		in  *inbox.Inbox[TTx]
		seq atomic.Int64
	)
	p := Pair{Name: "pipeline_" + storeName}
	p.Setup = func(ctx context.Context) (err error) {
		if d, err = ns(ctx); err != nil {
			return err
		}
		if ob, err = outbox.New(d, outbox.Config{}); err != nil {
			return err
		}
		in, err = inbox.New(d, inbox.Config{})
		return err
	}
	p.A = Side{Label: "idem", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		topic, err := e.stream(ctx, "pipeline")
		if err != nil {
			return Sample{}, err
		}
		orders, err := businessTable(ctx, d, e.name("orders"))
		if err != nil {
			return Sample{}, err
		}
		table := e.name("rows_pipeline")
		insert, err := businessTable(ctx, d, table)
		if err != nil {
			return Sample{}, err
		}
		start := time.Now()
		dr, err := startDrain(ctx, e, d, in, topic, insert)
		if err != nil {
			return Sample{}, err
		}
		defer dr.stop()
		s, err := throughput(ctx, time.Duration(float64(budget)*0.7), pipelineProducers, func(ctx context.Context, _ int) (int, error) {
			id := "o-" + strconv.FormatInt(seq.Add(1), 10)
			err := store.InTx(ctx, d, func(tx TTx) error {
				if _, err := d.Tx(tx).Exec(ctx, orders, id, payload, store.Micros(time.Now())); err != nil {
					return err
				}
				_, err := ob.EnqueueTx(ctx, tx, outbox.Event{Type: "bench.order.created", Topic: topic, Key: id, Payload: payload})
				return err
			})
			if err == nil && !d.SupportsListener() {
				dr.relay.r.Notify() // no LISTEN/NOTIFY to wake the relay: wake it in-process
			}
			return 1, err
		})
		if err != nil {
			return Sample{}, err
		}
		if err := waitRows(ctx, d, table, s.Ops, dr.errc); err != nil {
			return Sample{}, err
		}
		return Sample{Ops: s.Ops, Elapsed: time.Since(start)}, nil
	}}
	p.B = Side{Label: "plain", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		topic, err := e.stream(ctx, "plain")
		if err != nil {
			return Sample{}, err
		}
		orders, err := businessTable(ctx, d, e.name("orders"))
		if err != nil {
			return Sample{}, err
		}
		table := e.name("rows_plain")
		insert, err := businessTable(ctx, d, table)
		if err != nil {
			return Sample{}, err
		}
		pub, err := e.publisher()
		if err != nil {
			return Sample{}, err
		}
		sub, err := e.subscriber(ctx, topic)
		if err != nil {
			return Sample{}, err
		}
		defer sub.Close()
		start := time.Now()
		cctx, stop := context.WithCancel(ctx)
		defer stop()
		errc := make(chan error, 1)
		go func() { errc <- plainConsumer(cctx, d, sub, insert) }()
		s, err := throughput(ctx, time.Duration(float64(budget)*0.7), pipelineProducers, func(ctx context.Context, _ int) (int, error) {
			id := "o-" + strconv.FormatInt(seq.Add(1), 10)
			err := store.InTx(ctx, d, func(tx TTx) error {
				_, err := d.Tx(tx).Exec(ctx, orders, id, payload, store.Micros(time.Now()))
				return err
			})
			if err != nil {
				return 0, err
			}
			return 1, pub.Publish(ctx, idem.Message{ID: id, Subject: topic, Key: id, Payload: payload})
		})
		if err != nil {
			return Sample{}, err
		}
		if err := waitRows(ctx, d, table, s.Ops, errc); err != nil {
			return Sample{}, err
		}
		return Sample{Ops: s.Ops, Elapsed: time.Since(start)}, nil
	}}
	return p
}

// plainConsumer consumes in batches of 100 with one transaction per batch
// and no inbox, writing the batch's rows with one multi-row INSERT (as
// idem's consumer does with rowsHandler), then acks.
func plainConsumer[TTx any](ctx context.Context, d store.Driver[TTx], sub broker.Subscriber, insert string) error {
	for {
		ds, err := sub.Fetch(ctx, batchSize, 50*time.Millisecond)
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
		for i, dl := range ds {
			msgs[i] = dl.Message()
		}
		err = store.InTx(ctx, d, func(tx TTx) error { return insertMany(ctx, d, tx, insert, msgs) })
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("plain consumer: %w", err)
		}
		if err := ackAll(ctx, sub, ds); err != nil && ctx.Err() == nil {
			return err
		}
	}
}
