package boxoffice

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/idemkit/idem/broker/idemjetstream/embedded"
	"github.com/idemkit/idem/cmd/idem/internal/dsn"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/fakeprovider"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"
)

// Options configures [Open]: where the database, the broker and the e-mail
// provider are, with zero set-up defaults (an SQLite file and an embedded
// JetStream server under DataDir, an in-process fake provider).
type Options struct {
	// Config is the System's configuration; Open fills Broker and (when
	// empty) ProviderURL.
	Config
	// DataDir holds the embedded default's files. Defaults to "./idem-data".
	DataDir string
	// DatabaseURL is postgres://… or sqlite://path. Defaults to the SQLite
	// file DataDir/idem.db.
	DatabaseURL string
	// Schema is the PostgreSQL schema of idem's tables. Defaults to "idem".
	// The business tables (orders, invoices, …) are created in the same
	// schema, never in the connection's default one, so an application's
	// own tables of those names are left alone (see [Migrate]).
	Schema string
	// SQLiteSynchronous is the SQLite synchronous level. Defaults to FULL.
	SQLiteSynchronous string
	// Broker is the broker: "nats" (the default: JetStream, NATSURL or an
	// embedded server), "kafka" (Kafka, or an in-process kfake cluster
	// when Kafka is empty) or "rabbitmq" (AMQPURL, required).
	Broker string
	// Kafka lists the seed brokers (host:port) of the Kafka cluster for
	// Broker "kafka". Empty: an in-process cluster ([StartKafka]) that
	// lives as long as the System.
	Kafka []string
	// KafkaSessionTimeout is the consumer groups' session timeout on Kafka
	// (see [KafkaConfig.SessionTimeout]). Defaults to franz-go's, or to
	// [KafkaSessionTimeout] on the in-process cluster.
	KafkaSessionTimeout time.Duration
	// AMQPURL is the RabbitMQ server (amqp://…) for Broker "rabbitmq".
	AMQPURL string
	// NATSURL is the NATS server (with JetStream). Defaults to an embedded
	// JetStream server on loopback storing in DataDir/jetstream, which
	// refuses clients without its random password (see package
	// broker/jetstream/embedded).
	NATSURL string
	// NATSPort is the embedded server's port. Defaults to a free port.
	NATSPort int
	// Stream names the JetStream stream. Defaults to "BOXOFFICE".
	Stream string
	// Duplicates is the stream's duplicate window. Defaults to 2 minutes.
	Duplicates time.Duration
	// AckWait is the consumers' ack wait. Defaults to 30s.
	AckWait time.Duration
	// ProviderAddr is the listen address of the in-process fake provider
	// started when Config.ProviderURL is empty. Defaults to 127.0.0.1:0.
	ProviderAddr string
}

// dbPoolConns caps the PostgreSQL pool of [OpenDB] (the relay, three
// consumers, the effect and saga workers and the API share it): 24, so the
// workers' claims and completions do not queue behind a full API for a
// connection (at 10 the e-mails drained at a tenth of the order rate under
// the soak's 32 clients).
const dbPoolConns = 24

// OpenDB opens a database URL (internal/dsn): postgres://… / postgresql://…
// through pgx (store/pgxstore, a pool of at most 24 connections unless the
// URL sets pool_max_conns), sqlite://path through database/sql on
// modernc.org/sqlite. The driver's transaction type is erased (pgx.Tx or
// *sql.Tx behind any), so one System type serves both.
func OpenDB(ctx context.Context, url, schema, synchronous string) (store.Driver[any], error) {
	d, err := dsn.Open(ctx, url, dsn.Options{
		Names:    store.Names{Schema: schema},
		MaxConns: dbPoolConns,
		SQLite:   sqlstore.SQLiteConfig{Synchronous: synchronous},
	})
	if err != nil {
		return nil, fmt.Errorf("boxoffice: %w", err)
	}
	return d, nil
}

// Open creates what opts describes (database, broker, provider), builds the
// System on it and migrates the database. Close releases all of it. The
// database URL picks the driver ([OpenDB]): pgx for PostgreSQL,
// database/sql for SQLite.
func Open(ctx context.Context, opts Options) (_ *System[any], err error) {
	if opts.DataDir == "" {
		opts.DataDir = "./idem-data"
	}
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				_ = closers[i]()
			}
		}
	}()
	cfg := opts.Config
	var provider *fakeprovider.Provider
	if cfg.ProviderURL == "" && hasRole(cfg.Roles, RoleAPI, RoleEffects) {
		provider = fakeprovider.New(fakeprovider.Config{Addr: opts.ProviderAddr, Logger: cfg.Logger})
		if err := provider.Start(); err != nil {
			return nil, fmt.Errorf("boxoffice: start fake provider: %w", err)
		}
		closers = append(closers, provider.Close)
		cfg.ProviderURL = provider.URL()
	}
	dbURL := opts.DatabaseURL
	if dbURL == "" {
		dbURL = "sqlite://" + filepath.Join(opts.DataDir, "idem.db")
	}
	d, err := OpenDB(ctx, dbURL, opts.Schema, opts.SQLiteSynchronous)
	if err != nil {
		return nil, err
	}
	closers = append(closers, d.Close)
	natsURL, err := openBroker(ctx, &opts, &cfg, &closers)
	if err != nil {
		return nil, err
	}
	s, err := New(ctx, d, cfg)
	if err != nil {
		return nil, err
	}
	s.provider = provider
	s.closers = closers
	s.natsURL = natsURL
	return s, nil
}

// Broker names of [Options.Broker].
const (
	BrokerNATS     = "nats"
	BrokerKafka    = "kafka"
	BrokerRabbitMQ = "rabbitmq"
)

// openBroker sets cfg.Broker to the broker opts names (when the roles need
// one), appending what it started to closers; it returns the NATS URL
// (JetStream only).
func openBroker(ctx context.Context, opts *Options, cfg *Config, closers *[]func() error) (string, error) {
	kind := opts.Broker
	if kind == "" {
		kind = BrokerNATS
	}
	switch {
	case kind != BrokerNATS && kind != BrokerKafka && kind != BrokerRabbitMQ:
		return "", checks.Optionf("boxoffice: unknown broker %q (want nats, kafka or rabbitmq)", kind)
	case kind != BrokerNATS && opts.NATSURL != "":
		return "", checks.Optionf("boxoffice: a NATS URL is for the nats broker, not %s", kind)
	case kind != BrokerKafka && len(opts.Kafka) > 0:
		return "", checks.Optionf("boxoffice: Kafka brokers are for the kafka broker, not %s", kind)
	case kind != BrokerRabbitMQ && opts.AMQPURL != "":
		return "", checks.Optionf("boxoffice: an AMQP URL is for the rabbitmq broker, not %s", kind)
	case kind == BrokerRabbitMQ && opts.AMQPURL == "" && needsBroker(cfg.Roles):
		return "", checks.Optionf("boxoffice: the rabbitmq broker needs an AMQP URL (amqp://user:pass@host:5672/)")
	}
	if opts.AMQPURL != "" {
		if b, err := dsn.ParseBroker(opts.AMQPURL); err != nil || b.Kind != dsn.AMQP {
			return "", checks.Optionf("boxoffice: the AMQP URL must be amqp://… or amqps://…")
		}
	}
	switch kind {
	case BrokerKafka:
		if !needsBroker(cfg.Roles) && len(opts.Kafka) == 0 {
			return "", nil
		}
		seeds, session := opts.Kafka, opts.KafkaSessionTimeout
		if len(seeds) == 0 {
			c, err := StartKafka()
			if err != nil {
				return "", err
			}
			*closers = append(*closers, func() error { c.Close(); return nil })
			seeds, session = c.ListenAddrs(), cmp.Or(session, KafkaSessionTimeout)
		}
		b, err := DialKafka(ctx, KafkaConfig{Brokers: seeds, Topic: cfg.Subject, AckWait: opts.AckWait, SessionTimeout: session})
		if err != nil {
			return "", err
		}
		*closers = append(*closers, b.Close)
		cfg.Broker = b
		return "", nil
	case BrokerRabbitMQ:
		if opts.AMQPURL == "" {
			return "", nil
		}
		b, err := DialAMQP(ctx, AMQPConfig{URL: opts.AMQPURL, Subject: cfg.Subject, AckWait: opts.AckWait,
			Durables: []string{ConsumerNotification + cfg.DurableSuffix, ConsumerBilling + cfg.DurableSuffix, ConsumerSearch + cfg.DurableSuffix}})
		if err != nil {
			return "", err
		}
		*closers = append(*closers, b.Close)
		cfg.Broker = b
		return "", nil
	}
	natsURL := opts.NATSURL
	if natsURL != "" {
		if b, err := dsn.ParseBroker(natsURL); err != nil || b.Kind != dsn.NATS {
			return "", checks.Optionf("boxoffice: the broker URL must be nats://… or tls://… (NATS JetStream)")
		}
	}
	if natsURL == "" && needsBroker(cfg.Roles) {
		srv, err := embedded.Start(embedded.Config{DataDir: filepath.Join(opts.DataDir, "jetstream"), Port: opts.NATSPort, Logger: nil})
		if err != nil {
			return "", fmt.Errorf("boxoffice: start embedded JetStream: %w", err)
		}
		*closers = append(*closers, srv.Close)
		natsURL = srv.ClientURL()
	}
	if natsURL != "" {
		b, err := DialJetStream(ctx, JetStreamConfig{URL: natsURL, Stream: opts.Stream, Subject: cfg.Subject, Duplicates: opts.Duplicates, AckWait: opts.AckWait})
		if err != nil {
			return "", err
		}
		*closers = append(*closers, b.Close)
		cfg.Broker = b
	}
	return natsURL, nil
}

func hasRole(roles []Role, want ...Role) bool {
	if len(roles) == 0 {
		return true
	}
	for _, r := range roles {
		for _, w := range want {
			if r == w {
				return true
			}
		}
	}
	return false
}

func needsBroker(roles []Role) bool {
	if len(roles) == 0 {
		return true
	}
	for _, r := range roles {
		if r != RoleAPI && r != RoleEffects {
			return true
		}
	}
	return false
}

// Provider returns the in-process fake provider [Open] started, or nil.
func (s *System[TTx]) Provider() *fakeprovider.Provider { return s.provider }

// NATSURL returns the NATS server [Open] connected to ("" without a
// broker), safe to print: a password in it (the embedded server's always
// has one) is masked.
func (s *System[TTx]) NATSURL() string {
	if s.natsURL == "" {
		return ""
	}
	return redact.URL(s.natsURL)
}
