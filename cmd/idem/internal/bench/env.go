package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/cmd/idem/internal/dsn"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql"
	"github.com/idemkit/idem/store/pgxstore"
	"github.com/idemkit/idem/store/sqlstore"

	_ "modernc.org/sqlite" // the SQLite database/sql driver (the core module links none)
)

// Config says where the benchmarks run.
type Config struct {
	// Postgres is a postgres:// URL. When set, the PostgreSQL variants run
	// in a dedicated schema bench_<random>, created at Open and dropped at
	// Close. When empty, only SQLite runs.
	Postgres string
	// MySQL is a mysql:// URL. When set, the MySQL variants (pairs named
	// *_mysql) run in a dedicated database bench_<random> on its server,
	// created at Open and dropped at Close (the URL's own database need
	// not exist).
	MySQL string
	// SQLiteDir is where the SQLite database file bench_<random>.db is
	// created (and removed at Close). Defaults to a fresh temporary
	// directory.
	SQLiteDir string
	// NATS is a nats:// URL of a JetStream server. Defaults to an embedded
	// in-process server on a temporary directory.
	NATS string
	// RetentionRows, when positive, adds the retention_drop_vs_delete pair
	// (PostgreSQL only): each side expires that many inbox rows per round
	// (DefaultRetentionRows is the documented figure). Zero leaves it out:
	// it takes minutes.
	RetentionRows int
	// Peers names the peer libraries to compare with ("watermill",
	// "river"), none when empty. Peer pairs need Postgres.
	Peers []string
	// PeerDir is the directory of the peer harness module
	// (cmd/idem/internal/bench/peer). Defaults to the first
	// cmd/idem/internal/bench/peer found from the working directory upwards.
	PeerDir string
	// Logger receives diagnostics. Defaults to discarding.
	Logger *slog.Logger
}

// Env holds the databases and servers of one benchmark run. Close releases
// everything Open created.
type Env struct {
	cfg    Config
	log    *slog.Logger
	runID  string
	schema string // PostgreSQL schema of this run
	pgConn string // Postgres URL with search_path=schema

	sqliteDir   string
	ownSQLite   bool
	sqlite      *sqlstore.Driver
	pg          *pgxstore.Driver
	my          *idemmysql.Driver
	myDatabase  string // MySQL database of this run
	closers     []func() error
	closeOnce   sync.Once
	seq         atomic.Int64
	pgConnected bool
	walLogical  bool // the server decodes its WAL (outbox_relay_logical_vs_polling_postgres runs)

	extraSchemas []string // per-pair PostgreSQL schemas, dropped at Close

	jsOnce sync.Once
	js     natsjs.JetStream
	jsErr  error

	sqlOnce sync.Once
	sqlDB   *sql.DB
	sqlErr  error

	peerOnce sync.Once
	peerBin  string
	peerErr  error
}

// Open prepares a run: a fresh SQLite file, a fresh PostgreSQL schema
// when cfg.Postgres is set and a fresh MySQL database when cfg.MySQL is
// set, all migrated.
func Open(ctx context.Context, cfg Config) (_ *Env, err error) {
	for _, p := range cfg.Peers {
		if !slices.Contains(KnownPeers(), p) {
			return nil, fmt.Errorf("bench: unknown peer %q (want one of %v)", p, KnownPeers())
		}
	}
	if len(cfg.Peers) > 0 && cfg.Postgres == "" {
		return nil, errors.New("bench: --peer needs PostgreSQL (--db postgres://…)")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Env{cfg: cfg, log: cfg.Logger, runID: randomHex(4)}
	defer func() {
		if err != nil {
			_ = e.Close()
		}
	}()
	e.sqliteDir = cfg.SQLiteDir
	if e.sqliteDir == "" {
		if e.sqliteDir, err = os.MkdirTemp("", "idem-bench-"); err != nil {
			return nil, err
		}
		e.ownSQLite = true
	}
	path := e.sqliteDir + string(os.PathSeparator) + "bench_" + e.runID + ".db"
	e.sqlite, err = sqlstore.OpenSQLite(path, sqlstore.SQLiteConfig{MaxOpenConns: 16}, sqlstore.Config{})
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, func() error {
		err := e.sqlite.Close()
		for _, suffix := range []string{"", "-wal", "-shm"} {
			_ = os.Remove(path + suffix)
		}
		return err
	})
	if _, err := migrate.New(e.sqlite).Up(ctx); err != nil {
		return nil, fmt.Errorf("bench: migrate sqlite: %w", err)
	}
	if cfg.Postgres != "" {
		if err := e.openPostgres(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.MySQL != "" {
		if err := e.openMySQL(ctx); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *Env) openPostgres(ctx context.Context) error {
	e.schema = "bench_" + e.runID
	if err := e.pgExec(ctx, `CREATE SCHEMA `+e.schema); err != nil {
		return fmt.Errorf("bench: create schema: %w", err)
	}
	e.pgConnected = true
	e.closers = append(e.closers, e.dropSchema)
	e.pgConn = dsn.WithParam(e.cfg.Postgres, "search_path", e.schema)
	var err error
	e.pg, err = dsn.OpenPgx(ctx, dsn.Database{Dialect: store.Postgres, Conn: e.pgConn}, dsn.Options{MaxConns: 24, Names: store.Names{Schema: e.schema}})
	if err != nil {
		return err
	}
	e.closers = append(e.closers, e.pg.Close)
	if _, err := migrate.New(e.pg).Up(ctx); err != nil {
		return fmt.Errorf("bench: migrate postgres: %w", err)
	}
	var level string
	if err := e.pg.Pool().QueryRow(ctx, `SHOW wal_level`).Scan(&level); err != nil {
		return fmt.Errorf("bench: wal_level: %w", err)
	}
	e.walLogical = level == "logical"
	return nil
}

// pgExec runs statements on cfg.Postgres, on a connection of their own.
func (e *Env) pgExec(ctx context.Context, stmts ...string) error {
	db, err := dsn.ParsePostgres(e.cfg.Postgres)
	if err != nil {
		return err
	}
	d, err := dsn.OpenPgx(ctx, db, dsn.Options{MaxConns: 1})
	if err != nil {
		return fmt.Errorf("bench: connect PostgreSQL: %w", err)
	}
	defer d.Close()
	var errs []error
	for _, s := range stmts {
		if _, err := d.Pool().Exec(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (e *Env) dropSchema() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stmts []string
	for _, s := range append(e.extraSchemas, e.schema) {
		stmts = append(stmts, `DROP SCHEMA IF EXISTS "`+s+`" CASCADE`)
	}
	return e.pgExec(ctx, stmts...)
}

// Close releases the run's servers and drivers, drops the PostgreSQL schema
// and removes the SQLite file. It is safe to call more than once.
func (e *Env) Close() error {
	var errs []error
	e.closeOnce.Do(func() {
		for i := len(e.closers) - 1; i >= 0; i-- {
			if err := e.closers[i](); err != nil {
				errs = append(errs, err)
			}
		}
		if e.ownSQLite {
			_ = os.RemoveAll(e.sqliteDir)
		}
	})
	return errors.Join(errs...)
}

// Schema returns the PostgreSQL schema of this run ("" without PostgreSQL).
func (e *Env) Schema() string { return e.schema }

// stores lists the stores the store-level pairs run on.
func (e *Env) hasPostgres() bool { return e.pg != nil }

// name returns a fresh identifier with prefix, unique within the run.
func (e *Env) name(prefix string) string {
	return fmt.Sprintf("%s_%d", prefix, e.seq.Add(1))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// errDone ends a throughput worker early without failing the sample.
var errDone = errors.New("done")

// throughput runs op on workers goroutines until budget is spent and
// counts the operations each call reports. Elapsed runs from the start to
// the end of the last call.
func throughput(ctx context.Context, budget time.Duration, workers int, op func(ctx context.Context, worker int) (int, error)) (Sample, error) {
	var ops atomic.Int64
	errc := make(chan error, workers)
	start := time.Now()
	deadline := start.Add(budget)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := ctx.Err(); err != nil {
					errc <- err
					return
				}
				n, err := op(ctx, w)
				if errors.Is(err, errDone) {
					errc <- err
					return
				}
				if err != nil {
					errc <- err
					return
				}
				ops.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errc)
	if err := <-errc; err != nil {
		return Sample{}, err
	}
	return Sample{Ops: int(ops.Load()), Elapsed: elapsed}, nil
}

// payload is the 128-byte body every benchmark message carries.
var payload = []byte(`{"order_id":"00000000-0000-0000-0000-000000000000","amount_cents":4200,"currency":"EUR","seats":["A1","A2"],"x":"y"}`)
