package dsn_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idem/cmd/idem/internal/dsn"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql"
	"github.com/idemkit/idem/store/idemmysql/idemmysqltest"
	"github.com/idemkit/idem/store/sqlstore"
)

func TestParseDatabase(t *testing.T) {
	for _, c := range []struct {
		in      string
		dialect store.Dialect
		conn    string
		path    string
	}{
		{"postgres://u:p@h:5432/db?sslmode=disable", store.Postgres, "postgres://u:p@h:5432/db?sslmode=disable", ""},
		{"postgresql://h/db", store.Postgres, "postgresql://h/db", ""},
		{"postgres://h1:5432,h2:5433/db?target_session_attrs=read-write", store.Postgres, "postgres://h1:5432,h2:5433/db?target_session_attrs=read-write", ""},
		{"sqlite://./idem-data/idem.db", store.SQLite, "", "idem-data/idem.db"},
		{"sqlite:///var/lib/idem.db?_busy=1", store.SQLite, "", "/var/lib/idem.db"},
		{"sqlite://a/../b.db", store.SQLite, "", "b.db"},
	} {
		got, err := dsn.ParseDatabase(c.in)
		if err != nil {
			t.Fatalf("ParseDatabase(%q): %v", c.in, err)
		}
		if got.Dialect != c.dialect || got.Conn != c.conn || got.Path != c.path {
			t.Errorf("ParseDatabase(%q) = %+v, want %s %q %q", c.in, got, c.dialect, c.conn, c.path)
		}
	}
}

func TestParseDatabaseRefusals(t *testing.T) {
	for _, c := range []struct {
		in     string
		reason error
		scheme string
		msg    string
	}{
		{"", dsn.ErrEmpty, "", "is empty"},
		{"u:secretpw@host:5432/db", dsn.ErrNoScheme, "", "has no scheme: want postgres://…, mysql://user:pass@host:3306/db or sqlite://path"},
		{"./idem.db", dsn.ErrNoScheme, "", "has no scheme"},
		{"oracle://root:secretpw@h/db", dsn.ErrUnsupported, "oracle", `scheme "oracle" is not supported: want postgres`},
		{"mysql://root:secretpw@h", dsn.ErrNoPath, "mysql", "needs a host and a database"},
		{"sqlite://", dsn.ErrNoPath, "sqlite", "has no file path"},
		{"sqlite://?mode=ro", dsn.ErrNoPath, "sqlite", "has no file path"},
	} {
		_, err := dsn.ParseDatabase(c.in)
		if !errors.Is(err, c.reason) {
			t.Fatalf("ParseDatabase(%q) = %v, want %v", c.in, err, c.reason)
		}
		var de *dsn.Error
		if !errors.As(err, &de) || de.What != "database" || de.Scheme != c.scheme {
			t.Errorf("ParseDatabase(%q): error %#v, want a database *dsn.Error with scheme %q", c.in, err, c.scheme)
		}
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseDatabase(%q): %q does not say %q", c.in, err, c.msg)
		}
		if strings.Contains(err.Error(), "secretpw") {
			t.Errorf("ParseDatabase(%q): the error leaks the password: %q", c.in, err)
		}
	}
}

func TestParsePostgres(t *testing.T) {
	if d, err := dsn.ParsePostgres("postgres://h/db"); err != nil || d.Conn != "postgres://h/db" {
		t.Fatalf("ParsePostgres = %+v, %v", d, err)
	}
	if _, err := dsn.ParsePostgres("sqlite://x.db"); !errors.Is(err, dsn.ErrUnsupported) {
		t.Fatalf("ParsePostgres(sqlite) = %v, want ErrUnsupported", err)
	}
	if _, err := dsn.ParsePostgres("x"); !errors.Is(err, dsn.ErrNoScheme) {
		t.Fatalf("ParsePostgres(x) = %v, want ErrNoScheme", err)
	}
}

func TestParseBroker(t *testing.T) {
	for _, c := range []struct {
		in    string
		kind  dsn.BrokerKind
		seeds []string
		name  string
	}{
		{"nats://127.0.0.1:4222", dsn.NATS, nil, ""},
		{"tls://u:p@nats.example:4222", dsn.NATS, nil, ""},
		{"nats://a:4222, nats://b:4222", dsn.NATS, nil, ""},
		{"wss://nats.example:443", dsn.NATS, nil, ""},
		{"ws://a:8080,nats://b:4222", dsn.NATS, nil, ""},
		{"amqp://guest:guest@127.0.0.1:5672/", dsn.AMQP, nil, ""},
		{"amqps://rabbit.example/vhost", dsn.AMQP, nil, ""},
		{"kafka://k1:9093,k2", dsn.Kafka, []string{"k1:9093", "k2:9092"}, ""},
		{"kafka://[::1]:9094/?client_id=x", dsn.Kafka, []string{"[::1]:9094"}, ""},
		{"memory://", dsn.Memory, nil, ""},
		{"memory://orders", dsn.Memory, nil, "orders"},
	} {
		got, err := dsn.ParseBroker(c.in)
		if err != nil {
			t.Fatalf("ParseBroker(%q): %v", c.in, err)
		}
		if got.Kind != c.kind || got.URL != c.in || !slices.Equal(got.Seeds, c.seeds) || got.Name != c.name {
			t.Errorf("ParseBroker(%q) = %+v, want %s seeds %q name %q", c.in, got, c.kind, c.seeds, c.name)
		}
	}
}

func TestParseBrokerRefusals(t *testing.T) {
	for _, c := range []struct {
		in     string
		reason error
		scheme string
	}{
		{"", dsn.ErrEmpty, ""},
		{"127.0.0.1:4222", dsn.ErrNoScheme, ""},
		{"redis://:secretpw@h:6379", dsn.ErrUnsupported, "redis"},
		{"nats://a:4222,redis://b", dsn.ErrUnsupported, "redis"},
		{"nats://", dsn.ErrNoHost, "nats"},
		{"amqp://guest:secretpw@/vhost", dsn.ErrNoHost, "amqp"},
		{"kafka://", dsn.ErrNoHost, "kafka"},
		{"kafka://,/", dsn.ErrNoHost, "kafka"},
	} {
		_, err := dsn.ParseBroker(c.in)
		if !errors.Is(err, c.reason) {
			t.Fatalf("ParseBroker(%q) = %v, want %v", c.in, err, c.reason)
		}
		var de *dsn.Error
		if !errors.As(err, &de) || de.What != "broker" || de.Scheme != c.scheme {
			t.Errorf("ParseBroker(%q): error %#v, want a broker *dsn.Error with scheme %q", c.in, err, c.scheme)
		}
		if strings.Contains(err.Error(), "secretpw") {
			t.Errorf("ParseBroker(%q): the error leaks the password: %q", c.in, err)
		}
	}
}

func TestStringHidesPasswords(t *testing.T) {
	d, _ := dsn.ParseDatabase("postgres://u:secretpw@h/db")
	b, _ := dsn.ParseBroker("amqp://u:secretpw@h/")
	for _, s := range []string{d.String(), b.String()} {
		if strings.Contains(s, "secretpw") {
			t.Errorf("%q shows the password", s)
		}
	}
	if s, _ := dsn.ParseDatabase("sqlite://x/y.db"); s.String() != "sqlite://x/y.db" {
		t.Errorf("String = %q", s.String())
	}
}

func TestWithParam(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://h/db", "postgres://h/db?search_path=s1"},
		{"postgres://h/db?sslmode=disable", "postgres://h/db?search_path=s1&sslmode=disable"},
		{"postgres://h/db?search_path=old", "postgres://h/db?search_path=s1"},
	} {
		if got := dsn.WithParam(c.in, "search_path", "s1"); got != c.want {
			t.Errorf("WithParam(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// roundTrip writes and reads a row through the erased driver in one
// transaction, and checks a rolled-back one left nothing.
func roundTrip(t *testing.T, d store.Driver[any], table string) {
	t.Helper()
	ctx := context.Background()
	if _, err := d.Pool().Exec(ctx, `CREATE TABLE `+table+` (id BIGINT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if err := store.InTx(ctx, d, func(tx any) error {
		_, err := d.Tx(tx).Exec(ctx, `INSERT INTO `+table+` (id) VALUES ($1)`, 7)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := store.InTx(ctx, d, func(tx any) error {
		if _, err := d.Tx(tx).Exec(ctx, `INSERT INTO `+table+` (id) VALUES ($1)`, 8); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("InTx = %v, want boom", err)
	}
	var n, sum int64
	if err := d.Pool().QueryRow(ctx, `SELECT count(*), coalesce(sum(id), 0) FROM `+table).Scan(&n, &sum); err != nil {
		t.Fatal(err)
	}
	if n != 1 || sum != 7 {
		t.Fatalf("rows: count %d sum %d, want 1 row 7", n, sum)
	}
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+table+` (id) VALUES ($1)`, 7); !errors.Is(err, store.ErrUniqueViolation) {
		t.Fatalf("duplicate insert = %v, want store.ErrUniqueViolation (errors translated through the erased driver)", err)
	}
}

func TestOpenSQLite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "idem.db")
	if _, err := dsn.Open(ctx, "sqlite://"+path, dsn.Options{SQLite: sqlstore.SQLiteConfig{MustExist: true}}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open MustExist on a missing file = %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("MustExist created %s", path)
	}
	d, err := dsn.Open(ctx, "sqlite://"+path, dsn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Dialect() != store.SQLite || d.SupportsPipeline() || d.SupportsListener() {
		t.Fatalf("sqlite driver: dialect %s pipeline %v listener %v", d.Dialect(), d.SupportsPipeline(), d.SupportsListener())
	}
	roundTrip(t, d, "dsn_round_trip")
	if _, err := dsn.Open(ctx, "oracle://h/db", dsn.Options{}); !errors.Is(err, dsn.ErrUnsupported) {
		t.Fatalf("Open(oracle) = %v", err)
	}
}

// A mysql:// URL opens the MySQL driver (database/sql on go-sql-driver),
// through the erased driver like every other dialect.
func TestOpenMySQL(t *testing.T) {
	u := idemmysqltest.Database(t)
	db, err := dsn.ParseDatabase(u)
	if err != nil || db.Dialect != idemmysql.Dialect {
		t.Fatalf("ParseDatabase(mysql) = %+v, %v", db, err)
	}
	d, err := dsn.Open(context.Background(), u, dsn.Options{MaxConns: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Dialect() != idemmysql.Dialect || d.SupportsPipeline() || d.SupportsListener() || d.SupportsAdvisoryLocks() {
		t.Fatalf("mysql driver: dialect %s pipeline %v listener %v advisory %v", d.Dialect(), d.SupportsPipeline(), d.SupportsListener(), d.SupportsAdvisoryLocks())
	}
	roundTrip(t, d, "dsn_round_trip")
}

func TestOpenPostgresRunsOnPgx(t *testing.T) {
	pg := os.Getenv("IDEM_TEST_POSTGRES_URL")
	if pg == "" {
		t.Skip("IDEM_TEST_POSTGRES_URL not set")
	}
	ctx := context.Background()
	d, err := dsn.Open(ctx, pg, dsn.Options{MaxConns: 3, Names: store.Names{Schema: "dsn_test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// pgx declares the pipeline and listener abilities; database/sql does
	// not: the erased driver forwards them, so these prove pgx is behind.
	if d.Dialect() != store.Postgres || !d.SupportsPipeline() || !d.SupportsListener() || !d.SupportsAdvisoryLocks() {
		t.Fatalf("postgres driver: dialect %s pipeline %v listener %v advisory %v, want pgx's abilities", d.Dialect(), d.SupportsPipeline(), d.SupportsListener(), d.SupportsAdvisoryLocks())
	}
	if d.Names().Schema != "dsn_test" || d.Table("inbox") != `"dsn_test".inbox` {
		t.Fatalf("names %+v table %s", d.Names(), d.Table("inbox"))
	}
	table := "dsn_round_trip_" + strings.ReplaceAll(t.Name(), "/", "_")
	t.Cleanup(func() { _, _ = d.Pool().Exec(context.Background(), `DROP TABLE IF EXISTS `+table) })
	_, _ = d.Pool().Exec(ctx, `DROP TABLE IF EXISTS `+table)
	roundTrip(t, d, table)

	sd, err := dsn.OpenSQL(ctx, dsn.Database{Dialect: store.Postgres, Conn: pg}, dsn.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	if sd.SupportsPipeline() || sd.DB().Stats().MaxOpenConnections != 2 {
		t.Fatalf("OpenSQL: pipeline %v max open %d, want database/sql with 2", sd.SupportsPipeline(), sd.DB().Stats().MaxOpenConnections)
	}
	if _, err := dsn.OpenPgx(ctx, dsn.Database{Dialect: store.SQLite, Path: "x.db"}, dsn.Options{}); !errors.Is(err, dsn.ErrUnsupported) {
		t.Fatalf("OpenPgx(sqlite) = %v", err)
	}
}

func TestLayoutParam(t *testing.T) {
	d, err := dsn.ParseDatabase("postgres://u:secret@h:5432/db?sslmode=disable&idem_layout=partitioned")
	if err != nil {
		t.Fatal(err)
	}
	if d.Layout != store.LayoutPartitioned {
		t.Fatalf("layout %q, want partitioned", d.Layout)
	}
	if strings.Contains(d.Conn, "idem_layout") || !strings.Contains(d.Conn, "sslmode=disable") {
		t.Fatalf("conn %q: want the layout parameter removed and the others kept", d.Conn)
	}
	if d, err := dsn.ParseDatabase("postgres://h/db?idem_layout=plain"); err != nil || d.Layout != store.LayoutPlain {
		t.Fatalf("plain: %+v, %v", d, err)
	}
	if d, err := dsn.ParseDatabase("postgres://h/db"); err != nil || d.Layout != store.LayoutPlain || d.Conn != "postgres://h/db" {
		t.Fatalf("no parameter: %+v, %v", d, err)
	}
	if _, err := dsn.ParseDatabase("postgres://u:secret@h/db?idem_layout=sharded"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("unknown layout: %v, want an error without the password", err)
	}
}
