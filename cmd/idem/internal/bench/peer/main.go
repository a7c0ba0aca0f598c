// Command peer is the peer-library side of "idem bench --peer watermill,river":
// one round of one pair per run, printed as one JSON line on stdout
// ({"ops": N, "elapsed_ns": T}). It lives in its own Go module so idem's
// module never depends on Watermill or River (river.go has River's pairs,
// river_schedule and river_work).
//
// It uses Watermill's documented exactly-once setup on PostgreSQL
// (watermill-sql v4, database/sql over pgx's stdlib driver):
//
//   - produce: each of --workers producers loops for --duration over
//     transactions that insert one business row and publish one event with
//     a SQL publisher created on the same transaction;
//   - consume: --events events are published first (not timed); then a SQL
//     subscriber (SubscribeBatchSize --batch, consumer group "bench")
//     consumes them, writing one business row per event through
//     TxFromContext, the subscriber's own transaction that also stores the
//     consumer offset. Timed from the start of the subscriber until the
//     N-th business row is visible.
//
// Usage:
//
//	peer --db postgres://…?search_path=bench_x --pair produce|consume --tag r1 [--duration 2s] [--workers 8] [--events 10000] [--batch 100]
//	peer --db postgres://…?search_path=bench_x --pair river_schedule|river_work --river-schema bench_x_river --tag r1 [--duration 2s] [--workers 8|128] [--events 10000]
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// payload matches the idem side's 128-byte JSON body.
var payload = []byte(`{"order_id":"00000000-0000-0000-0000-000000000000","amount_cents":4200,"currency":"EUR","seats":["A1","A2"],"x":"y"}`)

type result struct {
	Ops       int   `json:"ops"`
	ElapsedNs int64 `json:"elapsed_ns"`
}

func main() {
	db := flag.String("db", "", "PostgreSQL URL (its search_path selects the schema)")
	pair := flag.String("pair", "", "produce, consume, river_schedule or river_work")
	riverSchema := flag.String("river-schema", "", "river_*: the schema of River's tables (created and migrated when missing)")
	tag := flag.String("tag", "r", "suffix of this round's tables and topic")
	duration := flag.Duration("duration", 2*time.Second, "produce: how long to run")
	workers := flag.Int("workers", 8, "produce, river_schedule: concurrent producers; river_work: the queue's MaxWorkers")
	events := flag.Int("events", 10000, "consume, river_work: events (jobs) to consume")
	cooldown := flag.Duration("fetch-cooldown", 0, "river_work: River's FetchCooldown (0: River's default, 100ms)")
	batch := flag.Int("batch", 100, "consume: SubscribeBatchSize")
	flag.Parse()
	if *db == "" {
		fail(errors.New("--db is required"))
	}
	sdb, err := sql.Open("pgx", *db)
	if err != nil {
		fail(err)
	}
	defer sdb.Close()
	sdb.SetMaxOpenConns(*workers + 8)
	sdb.SetMaxIdleConns(*workers + 8)
	ctx := context.Background()
	var res result
	switch *pair {
	case "produce":
		res, err = produce(ctx, sdb, *tag, *duration, *workers)
	case "consume":
		res, err = consume(ctx, sdb, *tag, *events, *batch)
	case "river_schedule", "river_work":
		if *riverSchema == "" {
			fail(errors.New("--river-schema is required"))
		}
		if *pair == "river_schedule" {
			res, err = riverSchedule(ctx, *db, *riverSchema, *tag, *duration, *workers)
		} else {
			res, err = riverWork(ctx, *db, *riverSchema, *events, *workers, *cooldown)
		}
	default:
		err = fmt.Errorf("--pair %q: want produce, consume, river_schedule or river_work", *pair)
	}
	if err != nil {
		fail(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "peer:", err)
	os.Exit(1)
}

func schema() wmsql.DefaultPostgreSQLSchema { return wmsql.DefaultPostgreSQLSchema{} }

// setup creates the business table and the topic's message and offset
// tables.
func setup(ctx context.Context, db *sql.DB, table, topic string, batch int) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+table+` (id text PRIMARY KEY, payload bytea NOT NULL, created_at bigint NOT NULL)`); err != nil {
		return err
	}
	sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromStdSQL(db), wmsql.SubscriberConfig{
		ConsumerGroup:    "bench",
		SchemaAdapter:    wmsql.DefaultPostgreSQLSchema{SubscribeBatchSize: batch},
		OffsetsAdapter:   wmsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer sub.Close()
	return sub.SubscribeInitialize(topic)
}

func produce(ctx context.Context, db *sql.DB, tag string, d time.Duration, workers int) (result, error) {
	table, topic := "wm_produce_"+tag, "bench_produce_"+tag
	if err := setup(ctx, db, table, topic, 100); err != nil {
		return result{}, err
	}
	insert := `INSERT INTO ` + table + ` (id, payload, created_at) VALUES ($1, $2, $3)`
	return producers(d, workers, func(id string) error { return produceOne(ctx, db, insert, topic, id) })
}

// producers runs one on workers goroutines for d, each call with a fresh
// order id (o-1, o-2, …), and counts the calls that succeeded; the first
// failure stops its goroutine and fails the round.
func producers(d time.Duration, workers int, one func(id string) error) (result, error) {
	var ops, seq atomic.Int64
	errc := make(chan error, workers)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if err := one("o-" + strconv.FormatInt(seq.Add(1), 10)); err != nil {
					errc <- err
					return
				}
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errc)
	if err := <-errc; err != nil {
		return result{}, err
	}
	return result{Ops: int(ops.Load()), ElapsedNs: elapsed.Nanoseconds()}, nil
}

// produceOne is one business transaction: a row and an event, committed
// together (Watermill's SQL publisher on the caller's transaction).
func produceOne(ctx context.Context, db *sql.DB, insert, topic, id string) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, insert, id, payload, time.Now().UnixMicro()); err != nil {
		return err
	}
	pub, err := wmsql.NewPublisher(wmsql.TxFromStdSQL(tx), wmsql.PublisherConfig{SchemaAdapter: schema()}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	msg := message.NewMessage(watermill.NewUUID(), payload)
	msg.Metadata.Set("order_id", id)
	if err := pub.Publish(topic, msg); err != nil {
		return err
	}
	return tx.Commit()
}

func consume(ctx context.Context, db *sql.DB, tag string, n, batch int) (result, error) {
	table, topic := "wm_consume_"+tag, "bench_consume_"+tag
	if err := setup(ctx, db, table, topic, batch); err != nil {
		return result{}, err
	}
	// The N events, committed before the clock starts.
	pub, err := wmsql.NewPublisher(wmsql.BeginnerFromStdSQL(db), wmsql.PublisherConfig{SchemaAdapter: schema()}, watermill.NopLogger{})
	if err != nil {
		return result{}, err
	}
	for i := 0; i < n; i += 500 {
		msgs := make([]*message.Message, 0, 500)
		for j := i; j < min(i+500, n); j++ {
			msgs = append(msgs, message.NewMessage(watermill.NewUUID(), payload))
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			return result{}, err
		}
	}
	insert := `INSERT INTO ` + table + ` (id, payload, created_at) VALUES ($1, $2, $3)`

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromStdSQL(db), wmsql.SubscriberConfig{
		ConsumerGroup:  "bench",
		SchemaAdapter:  wmsql.DefaultPostgreSQLSchema{SubscribeBatchSize: batch},
		OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{},
		PollInterval:   10 * time.Millisecond,
	}, watermill.NopLogger{})
	if err != nil {
		return result{}, err
	}
	defer sub.Close()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		return result{}, err
	}
	handlerErr := make(chan error, 1)
	go func() {
		for msg := range ch {
			tx, ok := wmsql.TxFromContext(msg.Context())
			if !ok {
				handlerErr <- errors.New("no transaction in the message context")
				return
			}
			if _, err := tx.ExecContext(msg.Context(), insert, msg.UUID, []byte(msg.Payload), time.Now().UnixMicro()); err != nil {
				msg.Nack()
				select {
				case handlerErr <- err:
				default:
				}
				continue
			}
			msg.Ack()
		}
	}()
	for {
		var got int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&got); err != nil {
			return result{}, err
		}
		if got >= n {
			elapsed := time.Since(start)
			if got != n {
				return result{}, fmt.Errorf("%d business rows for %d events", got, n)
			}
			return result{Ops: n, ElapsedNs: elapsed.Nanoseconds()}, nil
		}
		select {
		case err := <-handlerErr:
			return result{}, err
		case <-time.After(2 * time.Millisecond):
		}
		if time.Since(start) > 5*time.Minute {
			return result{}, fmt.Errorf("only %d of %d rows after 5 minutes", got, n)
		}
	}
}
