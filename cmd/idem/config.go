package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/idemkit/idem/cmd/idem/internal/dsn"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"
)

// defaultDatabaseURL is the embedded default: an SQLite file under ./idem-data.
const defaultDatabaseURL = "sqlite://./idem-data/idem.db"

// databaseURL picks --db, then IDEM_DATABASE_URL, then the default.
func databaseURL(env *Env, flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := env.Getenv("IDEM_DATABASE_URL"); v != "" {
		return v
	}
	return defaultDatabaseURL
}

// parseDatabaseURL parses a database URL (internal/dsn: postgres://,
// postgresql://, sqlite://path, sqlite:///abs/path); a refused one is a
// usage error that never echoes the URL (it may carry a password).
func parseDatabaseURL(u string) (dsn.Database, error) {
	t, err := dsn.ParseDatabase(u)
	if err != nil {
		return t, fmt.Errorf("%w: %w", errUsage, err)
	}
	return t, nil
}

// parseNATSURL checks a NATS JetStream URL (internal/dsn: nats://… or
// tls://…, several servers comma-separated); anything else is a usage
// error that never echoes the URL.
func parseNATSURL(u string) error {
	b, err := dsn.ParseBroker(u)
	if err != nil || b.Kind != dsn.NATS {
		return fmt.Errorf("%w: the broker URL must be nats://… or tls://… (NATS JetStream)", errUsage)
	}
	return nil
}

// mustExist is openSQL's create argument for the commands that must not
// create a database (all but "idem migrate up"): a mistyped SQLite path is
// an error, not a new empty database.
const mustExist = false

// openSQL opens the database at u through database/sql (SQLite,
// PostgreSQL via pgx's stdlib, or MySQL) for the operator commands. Unless create is
// set, a missing SQLite file is an error ("no database at path") and
// nothing is created. Errors never carry u's credentials.
func openSQL(ctx context.Context, u string, create bool) (store.Driver[*sql.Tx], error) {
	t, err := parseDatabaseURL(u)
	if err != nil {
		return nil, err
	}
	d, err := dsn.OpenSQLDriver(ctx, t, dsn.Options{SQLite: sqlstore.SQLiteConfig{MustExist: !create}})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no database at %s (check the path; 'idem migrate up' creates one)", t.Path)
	}
	return d, hideURL(err, u)
}

// hideURL returns err with every occurrence of the raw URL u in its message
// replaced by its redacted form, keeping err in the chain for errors.Is.
// Drivers already redact their own messages; this makes sure of it.
func hideURL(err error, u string) error {
	if err == nil || u == "" || !strings.Contains(err.Error(), u) {
		return err
	}
	return redactedError{msg: strings.ReplaceAll(err.Error(), u, redact.URL(u)), err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e redactedError) Error() string { return e.msg }
func (e redactedError) Unwrap() error { return e.err }

// describeDrillBroker names the broker of an idem drill run for its banner,
// without credentials.
func describeDrillBroker(name, natsURL, kafka, amqpURL string) string {
	switch name {
	case "kafka":
		if kafka != "" {
			return "Kafka " + kafka + " (a topic per scenario)"
		}
		return "Kafka, in-process cluster (kfake; a topic per scenario)"
	case "rabbitmq":
		return "RabbitMQ " + redact.URL(amqpURL) + " (queues per scenario)"
	}
	return or(redact.URL(natsURL), "embedded JetStream")
}
