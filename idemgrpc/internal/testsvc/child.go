package testsvc

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
	"github.com/idemkit/idem/store/sqlstore"

	_ "modernc.org/sqlite" // the SQLite database/sql driver (the core module links none)
)

// The environment of a child process: the test binary re-executed to run
// a server and nothing else (see the kill tests' TestMain).
const (
	EnvChild = "IDEMGRPC_TEST_CHILD"       // the store: "sqlite", "pgx" or "sql-postgres"
	EnvDB    = "IDEMGRPC_TEST_CHILD_DB"    // the SQLite path, or the PostgreSQL connection string and "#schema"
	EnvCrash = "IDEMGRPC_TEST_CHILD_CRASH" // CrashAfterWrite, CrashAfterCommit or ""
)

// The crash points of a child.
const (
	CrashAfterWrite  = "after-write"  // the handler inserted its row, the transaction is open
	CrashAfterCommit = "after-commit" // the record and the row committed, the reply not sent
)

// KillStores are the stores the kill tests run on.
var KillStores = []string{"sqlite", "pgx", "sql-postgres"}

// OpenStore opens the store name at db (as in EnvDB).
func OpenStore(ctx context.Context, name, db string) (store.Driver[any], func(), error) {
	path, schema, _ := strings.Cut(db, "#")
	switch name {
	case "sqlite":
		d, err := sqlstore.OpenSQLite(path, sqlstore.SQLiteConfig{Synchronous: "NORMAL"}, sqlstore.Config{})
		if err != nil {
			return nil, nil, err
		}
		return testdb.Erase(d), func() { d.Close() }, nil
	case "pgx":
		d, err := pgxstore.Open(ctx, path, pgxstore.Config{Names: store.Names{Schema: schema}})
		if err != nil {
			return nil, nil, err
		}
		return testdb.Erase(d), func() { d.Close() }, nil
	case "sql-postgres":
		d, err := sqlstore.OpenPostgres(ctx, path, sqlstore.Config{Names: store.Names{Schema: schema}})
		if err != nil {
			return nil, nil, err
		}
		return testdb.Erase(d), func() { d.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown store %q", name)
}

// PrepareStore creates a fresh, migrated store name with the orders table
// and returns its EnvDB value and the parent's driver on it. PostgreSQL
// skips t when IDEM_TEST_POSTGRES_URL is unset.
func PrepareStore(t *testing.T, name string) (string, store.Driver[any]) {
	t.Helper()
	var db string
	if name == "sqlite" {
		db = testdb.SQLitePath(t)
	} else {
		conn, schema := testdb.PostgresSchema(t)
		db = conn + "#" + schema
	}
	d, closeDB, err := OpenStore(t.Context(), name, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeDB)
	testdb.MustMigrate(t, d)
	testdb.Exec(t, d, OrdersTable)
	return db, d
}

// Block prints "CRASHPOINT" and blocks until the process is killed.
func Block() {
	fmt.Println("CRASHPOINT")
	select {}
}

// Child is a running server process.
type Child struct {
	cmd   *exec.Cmd
	Addr  string // what the child printed after "LISTEN "
	lines chan string
}

// StartChild re-executes the test binary as a server on store name at db,
// crashing at crash, and waits for its "LISTEN addr" line.
func StartChild(t *testing.T, name, db, crash string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), EnvChild+"="+name, EnvDB+"="+db, EnvCrash+"="+crash)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &Child{cmd: cmd, lines: make(chan string, 4)}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	line := c.Next(t)
	addr, ok := strings.CutPrefix(line, "LISTEN ")
	if !ok {
		t.Fatalf("child said %q, want LISTEN addr", line)
	}
	c.Addr = addr
	return c
}

// Next returns the child's next line; a child silent for a minute is a
// hung test, reported instead of waited for.
func (c *Child) Next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatal("child exited")
		}
		return l
	case <-time.After(time.Minute):
		t.Fatal("child silent for a minute")
	}
	return ""
}

// Kill9 sends SIGKILL and reaps the process.
func (c *Child) Kill9(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()
}

// Serve runs a child's server for d on lis: a serves the calls (it blocks
// after its insert at CrashAfterWrite); at CrashAfterCommit the server
// blocks after the idempotency interceptor returned.
type Serve func(d store.Driver[any], a *App, crash string, lis net.Listener) error

// Main is a kill test's TestMain: in a child process (EnvChild set) it
// opens the store, listens on loopback, prints "LISTEN addr", runs serve
// and exits; otherwise it runs the tests.
func Main(m *testing.M, serve Serve) {
	if os.Getenv(EnvChild) == "" {
		os.Exit(m.Run())
	}
	if err := runChild(serve); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runChild(serve Serve) error {
	d, closeDB, err := OpenStore(context.Background(), os.Getenv(EnvChild), os.Getenv(EnvDB))
	if err != nil {
		return err
	}
	defer closeDB()
	crash := os.Getenv(EnvCrash)
	a := &App{D: d}
	if crash == CrashAfterWrite {
		a.After = func(context.Context, int64) { Block() }
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println("LISTEN", lis.Addr().String())
	return serve(d, a, crash, lis)
}
