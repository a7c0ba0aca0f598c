// Command service is a small payment service wired end to end with idem:
//
//	POST /payments ──idemhttp (transactional)──▶ payments row + outbox event (one tx)
//	outbox.Relay ──▶ broker ──▶ consumer.Consumer "charges" (inbox) ──▶ effect.Ledger.ScheduleTx (one tx)
//	effect.Worker ──▶ provider POST /charges, Idempotency-Key = the effect's key
//
// The HTTP server, the relay, the consumer and the effect worker are started
// and stopped together by idem.Run; Ctrl-C stops them all. The provider is an
// in-process fake payment API (package fakeprovider) standing in for a third
// party. The wiring is this file; the business (the handler, the consumer's
// handler, the provider call) is payments.go.
//
// The database is PostgreSQL through pgx (idem's tables in schema "idem",
// payments in the connection's default schema; the handler's transaction is
// idemhttp.Tx[pgx.Tx]) or an SQLite file (database/sql, *sql.Tx). The broker
// is the in-process memory broker unless --nats names a JetStream server
// (stream PAYMENTS, subject payments.created, durable consumer "charges").
// The memory broker keeps nothing across a restart: an event it held but
// the consumer had not handled is lost with the process, so use --nats for
// a service that must survive one.
//
//	go run ./examples/service postgres://postgres@127.0.0.1:5432/test
//	go run ./examples/service --nats nats://127.0.0.1:4222 --addr 127.0.0.1:8080 postgres://…
//	go run ./examples/service sqlite:///tmp/payments.db
//	curl -i -X POST localhost:8080/payments -H 'Idempotency-Key: k1' -d '{"amount":1200,"currency":"EUR"}'
//
// What happens on a crash, a retry or a duplicate:
//   - A client retry with the same Idempotency-Key and body gets the stored
//     201 again (Idempotent-Replayed: true) and inserts nothing; the same key
//     with another body answers 422. A crash before the commit leaves nothing
//     (the retry executes); after it, everything (the retry replays).
//   - The relay publishes committed events only, and republishes with the
//     same message id after a crash between the broker's ack and its mark.
//   - The consumer records (consumer, message id) in its inbox in the same
//     transaction as the scheduled effect: a redelivered or republished
//     event is acknowledged as a duplicate and schedules nothing.
//   - The worker calls the provider with the effect's key; a worker that
//     dies after the call is followed by another call with the same key,
//     which the provider answers from its record without charging again.
//
// service_test.go runs it all in-process and checks those claims from the
// database and the provider's counters:
//
//	IDEM_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test IDEM_TEST_NATS_URL=nats://127.0.0.1:4222 \
//	  go test -race -count=1 ./examples/service/
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/fakeprovider"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
	"github.com/idemkit/idem/store/sqlstore"

	_ "modernc.org/sqlite" // the SQLite database/sql driver (the core module links none)
)

func main() {
	fs := flag.NewFlagSet("service", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // one usage line below instead of the flag package's
	var o options
	fs.StringVar(&o.Addr, "addr", "127.0.0.1:8080", "listen address of the HTTP API")
	fs.StringVar(&o.NATS, "nats", "", "NATS JetStream URL (default: the in-process memory broker)")
	err := fs.Parse(os.Args[1:])
	if err == nil && fs.NArg() > 0 { // the URL may come first: flags after it too
		o.DB = fs.Arg(0)
		err = fs.Parse(fs.Args()[1:])
	}
	if err != nil || fs.NArg() != 0 || o.DB == "" {
		fmt.Fprintln(os.Stderr, "usage: service [--addr host:port] [--nats nats://host:4222] postgres://user@host/db | sqlite://path")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, func(s *service) { log.Printf("listening on %s", s.URL) }); errors.Is(err, idem.ErrInvalidOption) {
		fmt.Fprintln(os.Stderr, err) // a bad database URL: one line, exit status 2
		os.Exit(2)
	} else if err != nil {
		log.Fatal(err)
	}
}

// options are the command line's; Stream and Subject default to PAYMENTS
// and payments.created.
type options struct{ DB, Addr, NATS, Stream, Subject string }

// service is what run started, handed to its started callback.
type service struct {
	URL      string                 // the HTTP API's base URL
	DB       store.Querier          // the database
	Provider *fakeprovider.Provider // the fake payment provider
	Pub      broker.Publisher       // the relay's publisher
	Memory   *memory.Broker         // the broker, unless --nats
}

// run runs the service until ctx is done; started (required) is called
// once it listens.
func run(ctx context.Context, o options, started func(*service)) error {
	o.Stream, o.Subject = cmp.Or(o.Stream, "PAYMENTS"), cmp.Or(o.Subject, "payments.created")
	pg, sqlite := strings.HasPrefix(o.DB, "postgres://") || strings.HasPrefix(o.DB, "postgresql://"), strings.HasPrefix(o.DB, "sqlite://")
	if !pg && !sqlite {
		return fmt.Errorf("%w: service: the database must be postgres://… or sqlite://…, not %q", idem.ErrInvalidOption, o.DB)
	}
	s := &service{Provider: fakeprovider.New(fakeprovider.Config{})}
	if err := s.Provider.Start(); err != nil {
		return err
	}
	defer s.Provider.Close()
	var sub broker.Subscriber
	if o.NATS == "" {
		b, err := memory.New(memory.Config{})
		if err != nil {
			return err
		}
		defer b.Close()
		s.Memory, s.Pub = b, b.Publisher()
		if sub, err = b.Subscribe(o.Subject, "charges"); err != nil {
			return err
		}
	} else {
		nc, js, err := idemjetstream.Dial(o.NATS)
		if err != nil {
			return err
		}
		defer nc.Close()
		if _, err := idemjetstream.EnsureStream(ctx, js, natsjs.StreamConfig{Name: o.Stream, Subjects: []string{o.Subject}}); err != nil {
			return err
		}
		if s.Pub, err = idemjetstream.NewPublisher(js, idemjetstream.PublisherConfig{}); err != nil {
			return err
		}
		if sub, err = idemjetstream.NewSubscriber(ctx, js, idemjetstream.SubscriberConfig{Stream: o.Stream, Durable: "charges"}); err != nil {
			return err
		}
	}
	if pg {
		d, err := pgxstore.Open(ctx, o.DB, pgxstore.Config{})
		if err != nil {
			return err
		}
		defer d.Close()
		return serve(ctx, d, s, sub, o, started)
	}
	d, err := sqlstore.OpenSQLite(strings.TrimPrefix(o.DB, "sqlite://"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		return err
	}
	defer d.Close()
	return serve(ctx, d, s, sub, o, started)
}

// serve builds the pipeline on d (pgx.Tx or *sql.Tx transactions) and runs it.
func serve[TTx any](ctx context.Context, d store.Driver[TTx], s *service, sub broker.Subscriber, o options, started func(*service)) error {
	if err := migrate.Up(ctx, d); err != nil { // idem's tables
		return err
	}
	if _, err := d.Pool().Exec(ctx, paymentsTable); err != nil { // the business table
		return err
	}
	s.DB = d.Pool()
	ob, err := outbox.New(d, outbox.Config{Source: "examples/service"})
	if err != nil {
		return err
	}
	ib, err := inbox.New(d, inbox.Config{})
	if err != nil {
		return err
	}
	ledger, err := effect.New(d, effect.Config{Lease: 10 * time.Second})
	if err != nil {
		return err
	}
	mw, err := idemhttp.New(d, idemhttp.Config{}) // transactional: the handler runs in the key's transaction
	if err != nil {
		return err
	}

	mux := http.NewServeMux() // POST /payments: the row and its event commit with the key's record
	mux.Handle("POST /payments", mw.Handler(createPayment(d, ob, o.Subject)))

	relay, err := outbox.NewRelay(d, s.Pub, outbox.RelayConfig{PollInterval: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	// The consumer schedules the charge in the transaction of its inbox record.
	charges, err := consumer.New(ib, sub, consumer.Config[TTx]{Name: "charges", Backoff: consumer.Backoff{Base: 100 * time.Millisecond, Max: 5 * time.Second},
		Handler: scheduleCharge(ledger)})
	if err != nil {
		return err
	}
	worker, err := effect.NewWorker(ledger, effect.WorkerConfig[TTx]{PollInterval: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	if err := worker.Register("charge", charge(fakeprovider.NewClient(s.Provider.URL()))); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.URL = "http://" + ln.Addr().String()
	api := idem.RunFunc(func(ctx context.Context) error { // serve until ctx is done, then drain
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(ln) }()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	started(s)
	return idem.Run(ctx, api, relay, charges, worker)
}
