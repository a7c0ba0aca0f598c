package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/cmd/idem/internal/dsn"
)

// runWorker runs some of the boxoffice's background components (relay,
// consumers, effect worker) in this process, on a shared database and
// broker (NATS JetStream, Kafka or RabbitMQ), until it is interrupted — or SIGKILLed by "idem drill
// --processes", which is what it is for.
func runWorker(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "worker", "--role relay|consumers|effects|notification|billing|search[,…] --db URL [--broker nats|kafka|rabbitmq] --nats URL|--kafka HOST:PORT,…|--amqp URL --provider URL")
	roles := fs.String("role", "", "comma-separated roles: relay, consumers (= notification,billing,search), notification, billing, search, effects")
	db := fs.String("db", "", "database URL (postgres://…, mysql://… or sqlite://path); env IDEM_DATABASE_URL")
	schema := fs.String("schema", "", "PostgreSQL schema of idem's tables (default idem)")
	brokerName := fs.String("broker", "nats", "broker: nats (JetStream), kafka or rabbitmq")
	natsURL := fs.String("nats", "", "with --broker nats: NATS server URL; env IDEM_NATS_URL")
	kafka := fs.String("kafka", "", "with --broker kafka: seed brokers host:port,…; env IDEM_KAFKA_BROKERS")
	amqpURL := fs.String("amqp", "", "with --broker rabbitmq: the RabbitMQ server amqp://user:pass@host:5672/; env IDEM_AMQP_URL")
	session := fs.Duration("kafka-session-timeout", 0, "with --broker kafka: consumer group session timeout (default 45s)")
	stream := fs.String("stream", "", "JetStream stream (default BOXOFFICE)")
	subject := fs.String("subject", "", "order subject: JetStream subject, Kafka topic, RabbitMQ routing key (default order-events)")
	provider := fs.String("provider", "", "e-mail provider base URL (required with effects)")
	ackWait := fs.Duration("ack-wait", 0, "consumer ack wait (default 30s)")
	dupWindow := fs.Duration("duplicates", 0, "stream duplicate window (default 2m)")
	lease := fs.Duration("effect-lease", 0, "effect lease (default 10s)")
	claimTTL := fs.Duration("claim-ttl", 0, "relay claim lease (default 10s)")
	poll := fs.Duration("poll", 0, "relay and effect worker idle poll (default 100ms)")
	verbose := fs.Bool("v", false, "log to stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var rs []boxoffice.Role
	for _, r := range strings.Split(*roles, ",") {
		switch r = strings.TrimSpace(r); r {
		case "":
		case "consumers":
			rs = append(rs, boxoffice.RoleNotification, boxoffice.RoleBilling, boxoffice.RoleSearch)
		case "api":
			return fmt.Errorf("%w: the worker does not serve the API; use idem demo", errUsage)
		default:
			role, err := boxoffice.ParseRole(r)
			if err != nil {
				return fmt.Errorf("%w: %v", errUsage, err)
			}
			rs = append(rs, role)
		}
	}
	if len(rs) == 0 {
		return fmt.Errorf("%w: --role is required", errUsage)
	}
	url := databaseURL(env, *db)
	b, err := workerBroker(env, *brokerName, *natsURL, *kafka, *amqpURL)
	if err != nil {
		return err
	}
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	sys, err := boxoffice.Open(ctx, boxoffice.Options{
		DatabaseURL: url, Schema: *schema, Stream: *stream,
		Broker: b.name, NATSURL: b.nats, Kafka: b.kafka, AMQPURL: b.amqp, KafkaSessionTimeout: *session,
		AckWait: *ackWait, Duplicates: *dupWindow, SQLiteSynchronous: "NORMAL",
		Config: boxoffice.Config{
			Roles: rs, Subject: *subject, ProviderURL: *provider,
			EffectLease: *lease, RelayClaimTTL: *claimTTL, PollInterval: *poll,
			RetryBase: 20 * time.Millisecond, RetryMax: 300 * time.Millisecond,
			Logger: logger,
		},
	})
	if err != nil {
		return hideURL(hideURL(err, b.nats), b.amqp)
	}
	defer sys.Close()
	return sys.Run(ctx)
}

// brokerTarget is the broker a command runs the reference system on.
type brokerTarget struct {
	name  string   // nats, kafka or rabbitmq
	nats  string   // --broker nats: the server
	kafka []string // --broker kafka: the seed brokers (empty: in-process)
	amqp  string   // --broker rabbitmq: the server
}

// parseBrokerFlags checks --broker and the address flags of the brokers
// (each only with its own broker); values left empty are taken from
// IDEM_NATS_URL, IDEM_KAFKA_BROKERS and IDEM_AMQP_URL for the broker
// chosen. RabbitMQ needs its URL. Errors are usage errors that never echo
// a URL.
func parseBrokerFlags(env *Env, name, natsURL, kafka, amqpURL string) (brokerTarget, error) {
	t := brokerTarget{name: name}
	switch name {
	case "", boxoffice.BrokerNATS:
		t.name = boxoffice.BrokerNATS
	case boxoffice.BrokerKafka, boxoffice.BrokerRabbitMQ:
	default:
		return t, fmt.Errorf("%w: unknown --broker %q (want nats, kafka or rabbitmq)", errUsage, name)
	}
	for _, f := range []struct {
		flag, value, broker string
	}{{"--nats", natsURL, boxoffice.BrokerNATS}, {"--kafka", kafka, boxoffice.BrokerKafka}, {"--amqp", amqpURL, boxoffice.BrokerRabbitMQ}} {
		if f.value != "" && f.broker != t.name {
			return t, fmt.Errorf("%w: %s is for --broker %s, not %s", errUsage, f.flag, f.broker, t.name)
		}
	}
	switch t.name {
	case boxoffice.BrokerNATS:
		t.nats = cmp.Or(natsURL, env.Getenv("IDEM_NATS_URL"))
		if t.nats != "" {
			if err := parseNATSURL(t.nats); err != nil {
				return t, err
			}
		}
	case boxoffice.BrokerKafka:
		for _, s := range strings.Split(cmp.Or(kafka, env.Getenv("IDEM_KAFKA_BROKERS")), ",") {
			if s = strings.TrimSpace(s); s != "" {
				if _, _, err := net.SplitHostPort(s); err != nil {
					return t, fmt.Errorf("%w: --kafka wants host:port[,host:port…]", errUsage)
				}
				t.kafka = append(t.kafka, s)
			}
		}
	case boxoffice.BrokerRabbitMQ:
		t.amqp = cmp.Or(amqpURL, env.Getenv("IDEM_AMQP_URL"))
		if t.amqp == "" {
			return t, fmt.Errorf("%w: --broker rabbitmq needs --amqp amqp://user:pass@host:5672/ (or IDEM_AMQP_URL)", errUsage)
		}
		if b, err := dsn.ParseBroker(t.amqp); err != nil || b.Kind != dsn.AMQP {
			return t, fmt.Errorf("%w: --amqp must be an amqp:// or amqps:// URL", errUsage)
		}
	}
	return t, nil
}

// workerBroker is parseBrokerFlags for idem worker, which joins servers
// other processes share: it needs --nats or --kafka too (an in-process
// default would be its own).
func workerBroker(env *Env, name, natsURL, kafka, amqpURL string) (brokerTarget, error) {
	t, err := parseBrokerFlags(env, name, natsURL, kafka, amqpURL)
	switch {
	case err != nil:
		return t, err
	case t.name == boxoffice.BrokerNATS && t.nats == "":
		return t, fmt.Errorf("%w: --nats is required", errUsage)
	case t.name == boxoffice.BrokerKafka && len(t.kafka) == 0:
		return t, fmt.Errorf("%w: --broker kafka needs --kafka host:port,… (or IDEM_KAFKA_BROKERS)", errUsage)
	}
	return t, nil
}
