package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/jetstream"
	"github.com/idemkit/idem/broker/jetstream/embedded"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/store/sqlstore"
)

// runCmd runs one idem command line in-process.
func runCmd(t *testing.T, vars map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := &Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return vars[k] }}
	code = run(context.Background(), env, args)
	return code, out.String(), errb.String()
}

// newDLQEnv migrates a fresh SQLite database, sets vars'
// IDEM_DATABASE_URL to it, and starts an embedded JetStream with an ORDERS
// stream on subject "orders"; it returns the database's dead-letter store
// (to park letters in), the server and its JetStream context. Everything
// is closed when the test ends.
func newDLQEnv(t *testing.T, vars map[string]string) (*dlq.Store[*sql.Tx], *embedded.Server, js.JetStream) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.db")
	vars["IDEM_DATABASE_URL"] = "sqlite://" + path
	if code, _, stderr := runCmd(t, vars, "migrate", "up"); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	d, err := sqlstore.OpenSQLite(path, sqlstore.SQLiteOptions{}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	letters, err := dlq.New(d, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, j, err := jetstream.Dial(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := jetstream.EnsureStream(context.Background(), j, js.StreamConfig{Name: "ORDERS", Subjects: []string{"orders"}, Storage: js.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	return letters, srv, j
}

func TestDLQGCStatsCommands(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"USER": "tester"}
	letters, srv, j := newDLQEnv(t, vars)
	ctx := context.Background()
	for i, id := range []string{"a", "b", "c", "d"} {
		class := idem.Permanent(errors.New("bad"))
		if i == 3 {
			class = idem.ErrInvalidInput
		}
		if _, err := letters.Park(ctx, dlq.FromMessage("billing", idem.Message{ID: id, Subject: "orders", Payload: []byte(`{"x":1}`), Attempt: 1}, class)); err != nil {
			t.Fatal(err)
		}
	}

	code, out, stderr := runCmd(t, vars, "dlq", "list", "--json", "--class", "permanent")
	if code != 0 {
		t.Fatalf("list: %d %s", code, stderr)
	}
	var ls []dlq.Letter
	if err := json.Unmarshal([]byte(out), &ls); err != nil || len(ls) != 3 {
		t.Fatalf("list --json: %v %s", err, out)
	}
	if code, out, _ = runCmd(t, vars, "dlq", "show", "1"); code != 0 || !strings.Contains(out, `{"x":1}`) || !strings.Contains(out, "billing") {
		t.Fatalf("show: %d %s", code, out)
	}
	if code, _, _ = runCmd(t, vars, "dlq", "discard", "4"); code != 0 {
		t.Fatal("discard failed")
	}
	if code, _, stderr = runCmd(t, vars, "dlq", "redrive", "--all"); code != 2 || !strings.Contains(stderr, "--nats") {
		t.Fatalf("redrive without a broker: %d %s", code, stderr)
	}
	// Flags after the action and ids work too.
	if code, out, stderr = runCmd(t, vars, "dlq", "redrive", "1", "--nats", srv.ClientURL(), "--by", "alice"); code != 0 || !strings.Contains(out, "redriven 1") {
		t.Fatalf("redrive 1: %d %s %s", code, out, stderr)
	}
	if code, _, stderr = runCmd(t, vars, "dlq", "redrive", "1", "--nats", srv.ClientURL()); code != 1 || !strings.Contains(stderr, "not parked") {
		t.Fatalf("second redrive: %d %s", code, stderr)
	}
	if code, out, stderr = runCmd(t, vars, "dlq", "redrive", "--all", "--consumer", "billing", "--json", "--nats", srv.ClientURL()); code != 0 || !strings.Contains(out, `"redriven":2`) {
		t.Fatalf("redrive --all: %d %s %s", code, out, stderr)
	}
	stream, _ := j.Stream(ctx, "ORDERS")
	info, _ := stream.Info(ctx)
	if info.State.Msgs != 3 {
		t.Fatalf("stream holds %d messages, want 3 redriven", info.State.Msgs)
	}
	if l, _ := letters.Get(ctx, 1); l.RedrivenBy != "alice" {
		t.Fatalf("redriven by %q", l.RedrivenBy)
	}
	if code, out, _ = runCmd(t, vars, "dlq", "list", "--state", "any"); code != 0 || strings.Count(out, "billing") != 4 {
		t.Fatalf("list --state any: %s", out)
	}

	// gc: resolved letters are kept 30 days by default; --dlq-retention 1ns drops them.
	time.Sleep(time.Millisecond)
	code, out, stderr = runCmd(t, vars, "gc", "--once", "--json", "--dlq-retention", "1ns")
	if code != 0 {
		t.Fatalf("gc: %s", stderr)
	}
	var rep struct{ Deleted map[string]int64 }
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Deleted["dead_letters"] != 4 {
		t.Fatalf("gc report: %v %s", err, out)
	}

	// stats: JSON and the human table carry the same numbers.
	if _, err := letters.Park(ctx, dlq.FromMessage("shipping", idem.Message{ID: "z", Payload: []byte("x")}, errors.New("boom"))); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runCmd(t, vars, "stats", "--json")
	if code != 0 {
		t.Fatalf("stats: %s", stderr)
	}
	var st struct {
		DeadLetters struct {
			Total int64
			By    map[string]int64
		} `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.DeadLetters.Total != 1 || st.DeadLetters.By["parked"] != 1 {
		t.Fatalf("stats --json: %v %s", err, out)
	}
	if code, out, _ = runCmd(t, vars, "stats"); code != 0 || !strings.Contains(out, "parked consumer shipping") {
		t.Fatalf("stats: %s", out)
	}
}
