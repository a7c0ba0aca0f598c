package boxoffice

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemkit/idem/broker/jetstream/embedded"
	"github.com/idemkit/idem/fakeprovider"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"
)

// Options configures [Open]: where the database, the broker and the e-mail
// provider are, with zero set-up defaults (an SQLite file and an embedded
// JetStream server under DataDir, an in-process fake provider).
type Options struct {
	// Config is the System's configuration; Open fills DB, Broker and
	// (when empty) ProviderURL.
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

// OpenDB opens a database URL: postgres://… / postgresql://… through pgx's
// database/sql adapter, sqlite://path (or a plain file path) through
// modernc.org/sqlite.
func OpenDB(ctx context.Context, url, schema, synchronous string) (*sqlstore.Driver, error) {
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		d, err := sqlstore.OpenPostgres(ctx, url, sqlstore.Config{Names: store.Names{Schema: schema}})
		if err != nil {
			return nil, err
		}
		d.DB().SetMaxOpenConns(10)
		d.DB().SetMaxIdleConns(10)
		return d, nil
	case url == "":
		return nil, errors.New("boxoffice: empty database URL")
	}
	p := strings.TrimPrefix(url, "sqlite://")
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if p == "" {
		return nil, fmt.Errorf("boxoffice: database URL %q has no file path", url)
	}
	return sqlstore.OpenSQLite(filepath.Clean(p), sqlstore.SQLiteOptions{Synchronous: synchronous}, sqlstore.Config{})
}

// Open creates what opts describes (database, broker, provider), builds the
// System on it and migrates the database. Close releases all of it.
func Open(ctx context.Context, opts Options) (_ *System, err error) {
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
	cfg.DB = d
	natsURL := opts.NATSURL
	if natsURL == "" && needsBroker(cfg.Roles) {
		srv, err := embedded.Start(embedded.Config{DataDir: filepath.Join(opts.DataDir, "jetstream"), Port: opts.NATSPort, Logger: nil})
		if err != nil {
			return nil, fmt.Errorf("boxoffice: start embedded JetStream: %w", err)
		}
		closers = append(closers, srv.Close)
		natsURL = srv.ClientURL()
	}
	if natsURL != "" {
		b, err := DialJetStream(ctx, JetStreamConfig{URL: natsURL, Stream: opts.Stream, Subject: cfg.Subject, Duplicates: opts.Duplicates, AckWait: opts.AckWait})
		if err != nil {
			return nil, err
		}
		closers = append(closers, b.Close)
		cfg.Broker = b
	}
	s, err := New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s.provider = provider
	s.closers = closers
	s.natsURL = natsURL
	return s, nil
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
func (s *System) Provider() *fakeprovider.Provider { return s.provider }

// NATSURL returns the NATS server [Open] connected to ("" without a
// broker), safe to print: a password in it (the embedded server's always
// has one) is masked.
func (s *System) NATSURL() string {
	if s.natsURL == "" {
		return ""
	}
	return redact.URL(s.natsURL)
}
