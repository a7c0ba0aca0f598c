package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/cmd/idem/internal/dsn"
	"github.com/idemkit/idem/internal/httpserver"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/store"
)

// runDemo starts the reference system (boxoffice) in one process: the HTTP
// API, the outbox relay, the consumers, the effect worker and a fake e-mail
// provider, on the embedded default (SQLite + embedded JetStream under
// --data) or on real servers (--db, --nats). Ctrl-C shuts it down cleanly.
func runDemo(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "demo", "[--addr 127.0.0.1:8080] [--data ./idem-data] [--db URL] [--broker nats|kafka|rabbitmq] [--nats URL] [--kafka HOST:PORT,…] [--amqp URL] [--webhook-secret whsec_…]")
	addr := fs.String("addr", "127.0.0.1:8080", "HTTP listen address")
	data := fs.String("data", "./idem-data", "directory of the embedded default (SQLite file, JetStream store)")
	db := fs.String("db", "", "database URL: postgres://…, mysql://… or sqlite://path (default: SQLite under --data; env IDEM_DATABASE_URL)")
	brokerName := fs.String("broker", "nats", "broker: nats (JetStream), kafka or rabbitmq")
	natsURL := fs.String("nats", "", "with --broker nats: NATS server URL with JetStream (default: embedded server; env IDEM_NATS_URL)")
	kafka := fs.String("kafka", "", "with --broker kafka: seed brokers host:port,… of a real cluster (default: an in-process cluster; env IDEM_KAFKA_BROKERS)")
	amqpURL := fs.String("amqp", "", "with --broker rabbitmq: the RabbitMQ server amqp://user:pass@host:5672/ (env IDEM_AMQP_URL)")
	secret := fs.String("webhook-secret", "", "Standard Webhooks secret for POST /webhooks/payments (whsec_…; default: generated; env IDEM_WEBHOOK_SECRET)")
	consoleToken := fs.String("console-token", "", "token of the operator console at /console/ (default: $IDEM_CONSOLE_TOKEN, else generated and printed)")
	seats := fs.Int64("seats", 1_000_000, "seats of every event")
	tracing := addTraceFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *db == "" {
		*db = env.Getenv("IDEM_DATABASE_URL")
	}
	bt, err := parseBrokerFlags(env, *brokerName, *natsURL, *kafka, *amqpURL)
	if err != nil {
		return err
	}
	secretFrom := "--webhook-secret"
	if *secret == "" {
		*secret, secretFrom = env.Getenv("IDEM_WEBHOOK_SECRET"), "IDEM_WEBHOOK_SECRET"
	}
	if *secret == "" {
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		*secret, secretFrom = "whsec_"+base64.StdEncoding.EncodeToString(b), ""
	}
	if !strings.HasPrefix(*secret, "whsec_") {
		return fmt.Errorf("%w: --webhook-secret must start with whsec_", errUsage)
	}
	if *seats <= 0 {
		return fmt.Errorf("%w: --seats must be positive", errUsage)
	}
	if *db != "" {
		if _, err := parseDatabaseURL(*db); err != nil {
			return err
		}
	}
	if env.CheckOnly {
		return nil
	}
	if *db == "" || (bt.name == boxoffice.BrokerNATS && bt.nats == "") {
		// The embedded default's files (customer e-mails, stored responses,
		// payloads) are for this user only.
		if err := os.MkdirAll(*data, 0o700); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", *addr, err)
	}
	defer ln.Close()
	tp, stopTracing, err := tracing.setup(ctx, "idem-demo")
	if err != nil {
		return err
	}
	defer func() { _ = stopTracing() }() // after sys.Close: flushes the last spans

	sys, err := boxoffice.Open(ctx, boxoffice.Options{
		DataDir:     *data,
		DatabaseURL: *db,
		Broker:      bt.name,
		NATSURL:     bt.nats,
		Kafka:       bt.kafka,
		AMQPURL:     bt.amqp,
		Config: boxoffice.Config{
			WebhookSecrets: []string{*secret},
			Seats:          *seats,
			TracerProvider: tp,
		},
	})
	if err != nil {
		return hideURL(hideURL(hideURL(err, *db), bt.nats), bt.amqp)
	}
	defer sys.Close()
	if err := sys.Start(ctx); err != nil {
		return err
	}
	con, err := newDemoConsole(ctx, env, sys, *consoleToken, describeDB(*db, *data))
	if err != nil {
		return err
	}
	defer con.close()
	srv := httpserver.New("", con.handler)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	url := "http://" + ln.Addr().String()
	w := env.Stdout
	fmt.Fprintf(w, "boxoffice is running at %s\n", url)
	fmt.Fprintf(w, "  database:       %s\n", describeDB(*db, *data))
	fmt.Fprintf(w, "  broker:         %s\n", describeBroker(bt, sys))
	fmt.Fprintf(w, "  e-mail provider: %s (fake, honours Idempotency-Key)\n", sys.Config().ProviderURL)
	con.printConsole(w, url)
	if d := tracing.describe(); d != "" {
		fmt.Fprintf(w, "  traces:         %s\n", d)
	}
	signSecret := "" // the --secret of the printed "idem webhook sign"
	switch secretFrom {
	case "": // generated: this is the only place it is shown
		fmt.Fprintf(w, "  webhook secret: %s (generated; pass --webhook-secret or IDEM_WEBHOOK_SECRET to keep one)\n\n", *secret)
		signSecret = " --secret " + shellQuote(*secret)
	case "IDEM_WEBHOOK_SECRET": // "idem webhook sign" reads it too
		fmt.Fprintf(w, "  webhook secret: from IDEM_WEBHOOK_SECRET\n\n")
	default:
		fmt.Fprintf(w, "  webhook secret: from --webhook-secret\n\n")
		signSecret = ` --secret "$IDEM_WEBHOOK_SECRET"`
	}
	fmt.Fprintf(w, "Try:\n")
	fmt.Fprintf(w, "  # create an order (run it twice: the second answer is replayed, Idempotent-Replayed: true)\n")
	fmt.Fprintf(w, "  curl -i -X POST %s/orders -H 'Idempotency-Key: order-1' -H 'X-Tenant-ID: acme' -H 'Content-Type: application/json' \\\n", url)
	fmt.Fprintf(w, "       -d '{\"event_id\":\"concert-1\",\"customer_email\":\"ana@example.com\",\"seats\":2,\"total_cents\":9000,\"currency\":\"EUR\"}'\n")
	fmt.Fprintf(w, "  # same key, different body: 422\n")
	fmt.Fprintf(w, "  curl -i -X POST %s/orders -H 'Idempotency-Key: order-1' -H 'X-Tenant-ID: acme' -H 'Content-Type: application/json' \\\n", url)
	fmt.Fprintf(w, "       -d '{\"event_id\":\"concert-1\",\"customer_email\":\"ana@example.com\",\"seats\":3,\"total_cents\":9000,\"currency\":\"EUR\"}'\n")
	fmt.Fprintf(w, "  # what happened: orders, events published, e-mails sent once, invoices, duplicates suppressed\n")
	fmt.Fprintf(w, "  curl -s %s/stats\n", url)
	fmt.Fprintf(w, "  # pay the order with a signed Standard Webhooks delivery; idem computes the signature (valid 5 minutes)\n")
	fmt.Fprintf(w, "  # and prints the curl command, sh runs it; replace ORDER_ID with the order_id of the first answer\n")
	if secretFrom == "--webhook-secret" {
		fmt.Fprintf(w, "  # (set IDEM_WEBHOOK_SECRET to the secret given with --webhook-secret)\n")
	}
	fmt.Fprintf(w, "  %s webhook sign%s --id msg_demo_1 --data '%s' --curl %s/webhooks/payments | sh\n\n",
		idemCommand(), signSecret, `{"type":"payment.succeeded","data":{"order_id":"ORDER_ID"}}`, url)
	con.printPoison(w, url)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Also: GET /orders/{id} (tenant-scoped), POST /webhooks/payments (Standard Webhooks), GET /metrics, GET /healthz.\n")
	fmt.Fprintf(w, "Press Ctrl-C to stop.\n")

	select {
	case <-ctx.Done():
	case err := <-served:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	fmt.Fprintln(w, "\nshutting down…")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	return errors.Join(err, sys.Close())
}

// idemCommand is how the start-up text invokes idem: "idem" when it is on
// the PATH, else "go run ./cmd/idem" (the README runs the demo that way
// from the repository root).
func idemCommand() string {
	if _, err := exec.LookPath("idem"); err == nil {
		return "idem"
	}
	return "go run ./cmd/idem"
}

// describeDB names the demo's database for its start-up text, without
// credentials.
func describeDB(db, data string) string {
	if db == "" {
		return "SQLite " + filepath.Join(data, "idem.db") + " (embedded default)"
	}
	if t, err := dsn.ParseDatabase(db); err == nil && t.Dialect == store.Postgres {
		return "PostgreSQL " + redact.URL(db) + " (pgx)"
	}
	return redact.URL(db)
}

// describeBroker names the demo's broker, without credentials: the
// embedded JetStream or the NATS server, the Kafka cluster (in-process or
// --kafka) with its order topic, the RabbitMQ server with its exchange.
func describeBroker(bt brokerTarget, sys *boxoffice.System[any]) string {
	switch b := sys.Config().Broker.(type) {
	case *boxoffice.KafkaBroker:
		where := "in-process (kfake) "
		if len(bt.kafka) > 0 {
			where = ""
		}
		return fmt.Sprintf("Kafka %s%s (topic %s, a consumer group per consumer)", where, strings.Join(b.Brokers(), ","), b.Topic())
	case *boxoffice.AMQPBroker:
		return fmt.Sprintf("RabbitMQ %s (exchange %s, routing key %s, a queue per consumer)", redact.URL(bt.amqp), b.Exchange(), sys.Config().Subject)
	}
	if bt.nats == "" {
		return "embedded JetStream " + sys.NATSURL() + " (subject " + sys.Config().Subject + ")"
	}
	return "NATS " + redact.URL(bt.nats) + " (subject " + sys.Config().Subject + ")"
}
