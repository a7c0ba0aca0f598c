// Package dsn is the one parser of the database and broker URLs idem's
// tools accept (postgres://, sqlite://, nats://, amqp://, kafka://,
// memory://), and the one opener of a database from its URL.
//
// Errors are [*Error] values wrapping one of the sentinels ([ErrEmpty],
// [ErrNoScheme], [ErrUnsupported], [ErrNoPath], [ErrNoHost]); check them
// with errors.Is. An error never carries the URL itself, which may hold a
// password: at most its scheme.
package dsn

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql"
)

// The reasons a URL is refused, wrapped by every [*Error].
var (
	// ErrEmpty is an empty URL.
	ErrEmpty = errors.New("empty URL")
	// ErrNoScheme is a URL without a scheme ("host:5432/db", a bare path).
	ErrNoScheme = errors.New("URL has no scheme")
	// ErrUnsupported is a URL whose scheme idem does not speak.
	ErrUnsupported = errors.New("URL scheme is not supported")
	// ErrNoPath is a sqlite:// URL without a file path.
	ErrNoPath = errors.New("URL has no file path")
	// ErrNoHost is a broker URL without a host (kafka://, nats://).
	ErrNoHost = errors.New("URL has no host")
)

// Error is a refused URL. It names what the URL was for and its scheme,
// never the URL.
type Error struct {
	// What is "database" or "broker".
	What string
	// Scheme is the URL's scheme, "" when it has none.
	Scheme string
	// Err is the reason: one of the package's sentinels.
	Err error
	msg string
}

// Error returns the message: the reason and what would be accepted.
func (e *Error) Error() string { return e.msg }

// Unwrap returns the reason, for errors.Is.
func (e *Error) Unwrap() error { return e.Err }

func refuse(what, scheme string, reason error, msg string, args ...any) error {
	return &Error{What: what, Scheme: scheme, Err: reason, msg: fmt.Sprintf(msg, args...)}
}

// wantDatabase is what ParseDatabase accepts, for its error messages.
const wantDatabase = "want postgres://…, mysql://user:pass@host:3306/db or sqlite://path"

// Database is a parsed database URL.
type Database struct {
	// Dialect is store.Postgres, store.SQLite or idemmysql.Dialect.
	Dialect store.Dialect
	// Conn is the PostgreSQL or MySQL connection URL as given (with its
	// query: sslmode, search_path, pool_max_conns, …); "" for SQLite.
	Conn string
	// Path is the SQLite file path, cleaned; "" for PostgreSQL.
	Path string
	// Layout is the layout of idem's tables the URL names with its
	// idem_layout query parameter (PostgreSQL: idem_layout=partitioned,
	// see package retention's Partition); the parameter is removed from
	// Conn. Empty: the plain layout.
	Layout store.Layout
}

// LayoutParam is the query parameter of a postgres:// URL naming the
// layout of idem's tables (store.Names.Layout).
const LayoutParam = "idem_layout"

// splitLayout removes LayoutParam from the PostgreSQL URL s and returns
// the layout it named.
func splitLayout(s string) (string, store.Layout, error) {
	if !strings.Contains(s, LayoutParam) {
		return s, store.LayoutPlain, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return s, store.LayoutPlain, nil // the driver reports the URL's error
	}
	q := u.Query()
	if !q.Has(LayoutParam) {
		return s, store.LayoutPlain, nil
	}
	layout := store.Layout(q.Get(LayoutParam))
	if layout != store.LayoutPartitioned && layout != "plain" {
		return "", "", refuse("database", "postgres", ErrUnsupported, "%s=%q is not a layout: want %s=%s (or plain)", LayoutParam, string(layout), LayoutParam, store.LayoutPartitioned)
	}
	if layout == "plain" {
		layout = store.LayoutPlain
	}
	q.Del(LayoutParam)
	u.RawQuery = q.Encode()
	return u.String(), layout, nil
}

// String returns the database for a message, without credentials.
func (d Database) String() string {
	if d.Dialect == store.SQLite {
		return "sqlite://" + d.Path
	}
	return redact.URL(d.Conn)
}

// ParseDatabase parses a database URL: postgres://… or postgresql://…
// (PostgreSQL; the URL is kept as given for the driver), sqlite://path
// (relative to the working directory; sqlite:///abs/path for an absolute
// one; a ?query is ignored), mysql://user:pass@host:3306/db (MySQL or
// MariaDB; its query parameters are go-sql-driver's).
func ParseDatabase(s string) (Database, error) {
	sc := redact.Scheme(s)
	switch {
	case s == "":
		return Database{}, refuse("database", "", ErrEmpty, "the database URL is empty: %s", wantDatabase)
	case sc == "postgres" || sc == "postgresql":
		// The driver parses the rest (and its errors hide the password).
		conn, layout, err := splitLayout(s)
		if err != nil {
			return Database{}, err
		}
		return Database{Dialect: store.Postgres, Conn: conn, Layout: layout}, nil
	case sc == "mysql":
		// MySQL or MariaDB: store/mysql parses the rest (the database is
		// the URL's path) and hides the password in its errors.
		if _, err := idemmysql.DSN(s); err != nil {
			return Database{}, refuse("database", sc, ErrNoPath, "the mysql:// database URL needs a host and a database (want mysql://user:pass@host:3306/db)")
		}
		return Database{Dialect: idemmysql.Dialect, Conn: s}, nil
	case sc == "sqlite":
		p := strings.TrimPrefix(s, "sqlite://")
		if i := strings.IndexByte(p, '?'); i >= 0 {
			p = p[:i]
		}
		if p == "" {
			return Database{}, refuse("database", sc, ErrNoPath, "the sqlite:// database URL has no file path (want sqlite://path/to/file.db)")
		}
		return Database{Dialect: store.SQLite, Path: filepath.Clean(p)}, nil
	case sc != "":
		return Database{}, refuse("database", sc, ErrUnsupported, "database URL scheme %q is not supported: %s", sc, wantDatabase)
	}
	return Database{}, refuse("database", "", ErrNoScheme, "the database URL has no scheme: %s", wantDatabase)
}

// ParsePostgres parses s as a PostgreSQL URL: like [ParseDatabase], and a
// sqlite:// URL is refused with [ErrUnsupported] (for the tools that need
// PostgreSQL, such as idem proxy).
func ParsePostgres(s string) (Database, error) {
	d, err := ParseDatabase(s)
	if err != nil {
		return d, err
	}
	if d.Dialect != store.Postgres {
		return Database{}, refuse("database", string(d.Dialect), ErrUnsupported, "database URL scheme %q is not supported here: want postgres://…", d.Dialect)
	}
	return d, nil
}

// BrokerKind names a broker idem ships an adapter for.
type BrokerKind string

// The brokers.
const (
	NATS   BrokerKind = "nats"   // NATS JetStream (broker/jetstream)
	AMQP   BrokerKind = "amqp"   // RabbitMQ / AMQP 0-9-1 (broker/amqp)
	Kafka  BrokerKind = "kafka"  // Kafka (broker/kafka)
	Memory BrokerKind = "memory" // the in-process broker (broker/memory)
)

// wantBroker is what ParseBroker accepts, for its error messages.
const wantBroker = "want nats://…, tls://…, ws://…, wss://…, amqp://…, amqps://…, kafka://host:port[,host:port…] or memory://"

// DefaultKafkaPort is the port a kafka:// seed without one gets.
const DefaultKafkaPort = "9092"

// Broker is a parsed broker URL.
type Broker struct {
	// Kind is the broker.
	Kind BrokerKind
	// URL is the URL as given: what nats.Connect (NATS; several servers
	// comma-separated) or amqp091 (AMQP) dial.
	URL string
	// Seeds are Kafka's seed brokers, host:port (nil for the others).
	Seeds []string
	// Name is the memory:// broker's name (memory://name; "" for
	// memory://).
	Name string
}

// String returns the broker for a message, without credentials.
func (b Broker) String() string { return redact.URL(b.URL) }

// ParseBroker parses a broker URL: nats://host:4222, tls://host:4222,
// ws://host or wss://host (NATS JetStream, over TCP, TLS or WebSocket;
// several servers comma-separated, each with one of those schemes), amqp:// or amqps:// (AMQP 0-9-1), kafka://host:port[,host:port…]
// (Kafka seed brokers; the port defaults to 9092), memory://NAME (the
// in-process broker).
func ParseBroker(s string) (Broker, error) {
	sc := redact.Scheme(s)
	switch {
	case s == "":
		return Broker{}, refuse("broker", "", ErrEmpty, "the broker URL is empty: %s", wantBroker)
	case natsScheme(sc):
		for _, part := range strings.Split(s, ",") {
			part = strings.TrimSpace(part)
			psc := redact.Scheme(part)
			if !natsScheme(psc) {
				return Broker{}, refuse("broker", psc, ErrUnsupported, "every server of a NATS broker URL must be nats://…, tls://…, ws://… or wss://…")
			}
			if hostOf(part[len(psc)+3:]) == "" {
				return Broker{}, refuse("broker", psc, ErrNoHost, "the %s:// broker URL has no host (want %s://host:4222)", psc, psc)
			}
		}
		return Broker{Kind: NATS, URL: s}, nil
	case sc == "amqp" || sc == "amqps":
		if hostOf(s[len(sc)+3:]) == "" {
			return Broker{}, refuse("broker", sc, ErrNoHost, "the %s:// broker URL has no host (want %s://user:pass@host:5672/vhost)", sc, sc)
		}
		return Broker{Kind: AMQP, URL: s}, nil
	case sc == "kafka":
		rest := strings.TrimPrefix(s, "kafka://")
		if i := strings.IndexAny(rest, "/?"); i >= 0 {
			rest = rest[:i]
		}
		var seeds []string
		for _, h := range strings.Split(rest, ",") {
			h = strings.TrimSpace(h)
			if h == "" {
				continue
			}
			if _, _, err := net.SplitHostPort(h); err != nil {
				h = net.JoinHostPort(strings.Trim(h, "[]"), DefaultKafkaPort)
			}
			seeds = append(seeds, h)
		}
		if len(seeds) == 0 {
			return Broker{}, refuse("broker", sc, ErrNoHost, "the kafka:// broker URL has no host (want kafka://host:9092[,host:9092…])")
		}
		return Broker{Kind: Kafka, URL: s, Seeds: seeds}, nil
	case sc == "memory":
		name := strings.TrimPrefix(s, "memory://")
		if i := strings.IndexAny(name, "/?"); i >= 0 {
			name = name[:i]
		}
		return Broker{Kind: Memory, URL: s, Name: name}, nil
	case sc != "":
		return Broker{}, refuse("broker", sc, ErrUnsupported, "broker URL scheme %q is not supported: %s", sc, wantBroker)
	}
	return Broker{}, refuse("broker", "", ErrNoScheme, "the broker URL has no scheme: %s", wantBroker)
}

// natsScheme reports whether sc is one of the schemes nats.Connect dials.
func natsScheme(sc string) bool { return sc == "nats" || sc == "tls" || sc == "ws" || sc == "wss" }

// hostOf returns the host part of an authority-first URL remainder
// ("user:pass@host:port/path?q" → "host:port"), "" when there is none.
func hostOf(rest string) string {
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:]
	}
	return rest
}
