package idemgrpc_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemgrpc/internal/testsvc"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
	"github.com/idemkit/idem/store/sqlstore"
)

// The child process of TestKillRestart: the test binary re-executed with
// envChild set runs a gRPC server and nothing else.
const (
	envChild = "IDEMGRPC_TEST_CHILD"       // "sqlite", "pgx" or "sql-postgres"
	envDB    = "IDEMGRPC_TEST_CHILD_DB"    // the SQLite path or the PostgreSQL connection string
	envCrash = "IDEMGRPC_TEST_CHILD_CRASH" // "after-write", "after-commit" or ""

	crashAfterWrite  = "after-write"  // the handler inserted its row, the transaction is open
	crashAfterCommit = "after-commit" // the record and the row committed, the reply not sent
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		if err := runChild(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// openStore opens the store the parent prepared (migrated, with the orders
// table): name is the driver, db its SQLite path or PostgreSQL
// connection string (whose search_path is the test's schema).
func openStore(ctx context.Context, name, db, schema string) (store.Driver[any], func(), error) {
	switch name {
	case "sqlite":
		d, err := sqlstore.OpenSQLite(db, sqlstore.SQLiteOptions{Synchronous: "NORMAL"}, sqlstore.Config{})
		if err != nil {
			return nil, nil, err
		}
		return testdb.Erase(d), func() { d.Close() }, nil
	case "pgx":
		d, err := pgxstore.Open(ctx, db, pgxstore.Config{Names: store.Names{Schema: schema}})
		if err != nil {
			return nil, nil, err
		}
		return testdb.Erase(d), func() { d.Close() }, nil
	case "sql-postgres":
		d, err := sqlstore.OpenPostgres(ctx, db, sqlstore.Config{Names: store.Names{Schema: schema}})
		if err != nil {
			return nil, nil, err
		}
		return testdb.Erase(d), func() { d.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown store %q", name)
}

// runChild serves Orders on a loopback port it prints ("LISTEN addr"); at
// the crash point it prints "CRASHPOINT" and blocks until it is killed.
func runChild() error {
	ctx := context.Background()
	name, db := os.Getenv(envChild), os.Getenv(envDB)
	db, schema, _ := strings.Cut(db, "#")
	d, closeDB, err := openStore(ctx, name, db, schema)
	if err != nil {
		return err
	}
	defer closeDB()
	crash := os.Getenv(envCrash)
	block := func() {
		fmt.Println("CRASHPOINT")
		select {} // until SIGKILL
	}
	a := &app{D: d}
	if crash == crashAfterWrite {
		a.After = func(context.Context, int64) { block() }
	}
	ic, err := idemgrpc.UnaryServerInterceptor(d, idemgrpc.Config{})
	if err != nil {
		return err
	}
	// Outside the idempotency interceptor: it returns after the commit.
	outer := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		res, err := h(ctx, req)
		if err == nil && crash == crashAfterCommit {
			block()
		}
		return res, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(outer, ic))
	desc, impl := testsvc.GRPC(a)
	srv.RegisterService(desc, impl)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println("LISTEN", lis.Addr().String())
	return srv.Serve(lis)
}

// child is a running server process.
type child struct {
	cmd   *exec.Cmd
	addr  string
	lines chan string
}

func startChild(t *testing.T, name, db, crash string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+name, envDB+"="+db, envCrash+"="+crash)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 4)}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		_, _ = io.Copy(io.Discard, out)
	}()
	line := c.next(t)
	addr, ok := strings.CutPrefix(line, "LISTEN ")
	if !ok {
		t.Fatalf("child said %q, want LISTEN addr", line)
	}
	c.addr = addr
	return c
}

// next returns the child's next line; a child that says nothing for a
// minute is a hung test, reported instead of waited for.
func (c *child) next(t *testing.T) string {
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

// kill9 sends SIGKILL and reaps the process.
func (c *child) kill9(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()
}

// TestKillRestart kills the server with SIGKILL in the middle of a call —
// after the handler's insert, before the commit; and after the commit,
// before the reply — restarts it, and retries with the same key: the
// first case executes once (the killed transaction left nothing), the
// second replays (the committed record answers); either way the database
// holds exactly one order.
func TestKillRestart(t *testing.T) {
	for _, name := range []string{"sqlite", "pgx", "sql-postgres"} {
		t.Run(name, func(t *testing.T) {
			var db string
			switch name {
			case "sqlite":
				db = testdb.SQLitePath(t)
			default:
				conn, schema := testdb.PostgresSchema(t)
				db = conn + "#" + schema
			}
			path, schema, _ := strings.Cut(db, "#")
			parent, closeDB, err := openStore(t.Context(), name, path, schema)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(closeDB)
			testdb.MustMigrate(t, parent)
			testdb.Exec(t, parent, ordersTable)

			for _, crash := range []string{crashAfterWrite, crashAfterCommit} {
				t.Run(crash, func(t *testing.T) {
					testdb.Exec(t, parent, `DELETE FROM orders`)
					key := "k-kill-" + crash
					ctx := withKey(t.Context(), key, "")

					first := startChild(t, name, db, crash)
					done := make(chan reply, 1)
					go func() { done <- create(ctx, dialConn(t, first.addr), testsvc.NewCreate("book", 1, nil)) }()
					if l := first.next(t); l != "CRASHPOINT" {
						t.Fatalf("child said %q, want CRASHPOINT", l)
					}
					first.kill9(t)
					if r := <-done; r.err == nil {
						t.Fatal("the call to the killed server succeeded")
					}
					want := map[string]int{crashAfterWrite: 0, crashAfterCommit: 1}[crash]
					if n := rows(t, parent); n != want {
						t.Fatalf("%d orders after the kill, want %d", n, want)
					}

					second := startChild(t, name, db, "")
					conn := dialConn(t, second.addr)
					retry := create(ctx, conn, testsvc.NewCreate("book", 1, nil))
					if retry.err != nil {
						t.Fatal(retry.err)
					}
					if wantReplay := crash == crashAfterCommit; retry.replayed() != wantReplay {
						t.Fatalf("retry replayed %v, want %v", retry.replayed(), wantReplay)
					}
					again := create(ctx, conn, testsvc.NewCreate("book", 1, nil))
					if again.err != nil || !again.replayed() || testsvc.String(again.order, "id") != testsvc.String(retry.order, "id") {
						t.Fatalf("second retry: %v, replayed %v", again.err, again.replayed())
					}
					if n := rows(t, parent); n != 1 {
						t.Fatalf("%d orders after the restart and retries, want exactly 1", n)
					}
					if n := testdb.Count(t, parent, `SELECT count(*) FROM orders WHERE idem_key = $1`, key); n != 1 {
						t.Fatalf("%d orders with the key, want 1", n)
					}
					second.kill9(t)
				})
			}
		})
	}
}
