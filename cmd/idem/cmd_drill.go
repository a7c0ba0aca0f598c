package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/internal/drill"
	"github.com/idemkit/idem/internal/redact"
)

// runDrill runs the fault drill against the reference system — lost
// responses, racing duplicates, key reuse, crashes before the ack, webhook
// replays, relay double publishes, worker crashes after the provider call,
// late retries after expiry, concurrent deliveries, transient and poison
// messages with dead-lettering and redrive, events out of order, provider
// time-outs, replay equivalence, and with --processes SIGKILLed worker
// processes (package drill lists them) — and exits 1 when a scenario breaks
// its invariant. A configuration problem (bad flags, a --db or --nats
// target that cannot be reached) exits 2 with one line on stderr before
// anything else is printed.
func runDrill(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "drill", "[--orders 2000] [--duplicates 0.3] [--crash 0.1] [--workers 8] [--seed N] [--db URL] [--nats URL] [--broker nats|kafka|rabbitmq] [--kafka HOST:PORT,…] [--amqp URL] [--nats-cluster N] [--scenario NAME|all] [--processes] [--json]")
	orders := fs.Int("orders", 2000, "orders of the load scenarios (the focused ones use a tenth, 20 to 200)")
	duplicates := fs.Float64("duplicates", 0.3, "share of requests whose response is lost and retried")
	crash := fs.Float64("crash", 0.1, "share of deliveries and effect calls hit by a simulated crash")
	workers := fs.Int("workers", 8, "concurrent HTTP clients")
	seed := fs.Uint64("seed", 1, "seed of every random choice")
	db := fs.String("db", "", "run on PostgreSQL: postgres://… (a fresh schema per scenario), or MySQL/MariaDB: mysql://user:pass@host:3306/db (a fresh database per scenario); default: fresh SQLite files")
	natsURL := fs.String("nats", "", "run on a NATS server with JetStream (a stream per scenario); default: embedded JetStream")
	brokerName := fs.String("broker", "nats", "broker of the reference system: nats (JetStream), kafka or rabbitmq")
	kafka := fs.String("kafka", "", "with --broker kafka: seed brokers host:port,… of a real cluster; default: an in-process kfake cluster")
	amqpURL := fs.String("amqp", "", "with --broker rabbitmq: the RabbitMQ server, amqp://user:pass@host:5672/")
	natsCluster := fs.Int("nats-cluster", 0, "run on an embedded JetStream cluster of N nodes (at least 3) whose leaders are killed during the load")
	scenario := fs.String("scenario", "all", "scenario to run, or all: "+strings.Join(drill.Names(), ", "))
	processes := fs.Bool("processes", false, "also run relays, consumers and effect workers as child processes that are SIGKILLed and restarted")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	timeout := fs.Duration("timeout", 60*time.Second, "longest wait for one scenario to settle")
	tracing := addTraceFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *db != "" {
		if !drill.ValidDatabaseURL(*db) {
			return fmt.Errorf("%w: --db must be a postgres:// or mysql:// URL (the drill's default is a fresh SQLite file per scenario)", errUsage)
		}
	}
	cfg := drill.Config{
		Orders: *orders, Duplicates: *duplicates, Crash: *crash, Workers: *workers, Seed: *seed,
		DatabaseURL: *db, NATSURL: *natsURL, Processes: *processes, Timeout: *timeout,
		Broker: *brokerName, AMQPURL: *amqpURL, NATSCluster: *natsCluster,
	}
	if *kafka != "" {
		cfg.Kafka = strings.Split(*kafka, ",")
	}
	if *scenario != "" && *scenario != "all" {
		cfg.Scenarios = strings.Split(*scenario, ",")
	}
	if env.CheckOnly {
		if err := drill.CheckOptions(cfg); err != nil {
			return drillConfigError(err)
		}
		return nil
	}
	// Options and targets first: a bad one is one line, before the banner.
	if err := drill.Check(ctx, cfg); err != nil {
		return drillConfigError(err)
	}
	// Spans of the systems the drill builds in this process (they use the
	// global provider this installs); --processes children are not traced.
	_, stopTracing, err := tracing.setup(ctx, "idem-drill")
	if err != nil {
		return err
	}
	defer func() { _ = stopTracing() }()
	var bar *progressbar.ProgressBar
	if f, ok := env.Stderr.(*os.File); ok && !*asJSON && term.IsTerminal(int(f.Fd())) {
		cfg.Progress = func(done, total int, name string) {
			if bar == nil {
				bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(f), progressbar.OptionSetWidth(30),
					progressbar.OptionShowCount(), progressbar.OptionClearOnFinish(), progressbar.OptionSetPredictTime(false))
			}
			_ = bar.Set(done)
			if name != "" {
				bar.Describe(fmt.Sprintf("%-24s", name))
			} else {
				_ = bar.Finish()
				fmt.Fprintln(f)
			}
		}
	} else if !*asJSON {
		cfg.Progress = func(done, total int, name string) {
			if name != "" {
				fmt.Fprintf(env.Stderr, "[%d/%d] %s\n", done+1, total, name)
			}
		}
	}
	if !*asJSON {
		// Short lines (the report fits 100 columns): the targets on their own.
		fmt.Fprintf(env.Stdout, "idem drill: %d orders, %.0f%% lost responses, %.0f%% crashes, %d clients, seed %d\n",
			*orders, *duplicates*100, *crash*100, *workers, *seed)
		brokerLine := describeDrillBroker(*brokerName, *natsURL, *kafka, *amqpURL)
		if *natsCluster > 0 {
			brokerLine = fmt.Sprintf("embedded JetStream cluster of %d nodes (leaders killed during the run)", *natsCluster)
		}
		fmt.Fprintf(env.Stdout, "database: %s\nbroker:   %s\n\n",
			or(redact.URL(*db), "SQLite (a fresh file per scenario)"), brokerLine)
	}
	rep, err := drill.Run(ctx, cfg)
	if err != nil {
		return drillConfigError(err)
	}
	if *asJSON {
		if err := rep.WriteJSON(env.Stdout); err != nil {
			return err
		}
	} else {
		rep.WriteTable(env.Stdout)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !rep.Pass {
		return errFailed
	}
	return nil
}

// drillConfigError turns an error of drill.Check or drill.Run (options,
// targets) into a configuration error: exit 2, its message one line without
// the package prefixes.
func drillConfigError(err error) error {
	msg := err.Error()
	for _, p := range []string{idem.ErrInvalidOption.Error() + ": ", "drill: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return drillSetupError{msg: strings.Join(strings.Fields(msg), " "), err: err}
}

// drillSetupError is a configuration problem reported like a usage error (it
// matches errUsage: exit 2) with its own message.
type drillSetupError struct {
	msg string
	err error
}

func (e drillSetupError) Error() string        { return e.msg }
func (e drillSetupError) Unwrap() error        { return e.err }
func (e drillSetupError) Is(target error) bool { return target == errUsage }

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

var _ io.Writer
