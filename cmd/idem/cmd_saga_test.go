package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/saga"
	"github.com/idemkit/idem/store/sqlstore"
)

// TestSagaListShow: idem saga list shows a completed and a compensated saga,
// --state filters, show prints every barrier row (the null compensation and
// the refused action included) with its effect, --json round-trips.
func TestSagaListShow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	vars := map[string]string{"IDEM_DATABASE_URL": "sqlite://" + filepath.Join(dir, "idem.db")}
	if code, _, stderr := runCmd(t, vars, "migrate", "up"); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	ctx := context.Background()
	d, err := sqlstore.OpenSQLite(filepath.Join(dir, "idem.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ledger, _ := effect.New(d, effect.Config{})
	def := saga.Definition[*sql.Tx]{Name: "pay", Steps: []saga.Step[*sql.Tx]{
		{Name: "hold", DoTx: func(context.Context, *sql.Tx, saga.Call) ([]byte, error) { return []byte(`{"held":true}`), nil },
			UndoTx: func(context.Context, *sql.Tx, saga.Call) ([]byte, error) { return nil, nil }},
		{Name: "charge", Do: func(_ context.Context, c saga.Call) ([]byte, error) {
			if string(c.Input) == `"decline"` {
				return nil, idem.Permanent(errors.New("card declined\x1b[31m"))
			}
			return []byte(`{"id":"ch_1"}`), nil
		}},
	}}
	sagas, err := saga.New(d, ledger, saga.Config{}, def)
	if err != nil {
		t.Fatal(err)
	}
	for id, in := range map[string]string{"ok-1": `"ok"`, "bad-1": `"decline"`} {
		if _, _, err := sagas.Start(ctx, "pay", id, []byte(in)); err != nil {
			t.Fatal(err)
		}
	}
	w, _ := saga.NewWorker(sagas, saga.WorkerConfig[*sql.Tx]{Effect: effect.WorkerConfig[*sql.Tx]{PollInterval: 5 * time.Millisecond}})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(rctx) }()
	for deadline := time.Now().Add(20 * time.Second); ; {
		a, _ := sagas.Get(ctx, "ok-1")
		b, _ := sagas.Get(ctx, "bad-1")
		if a.State == saga.Completed && b.State == saga.Compensated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sagas %+v %+v", a, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	<-done

	code, out, stderr := runCmd(t, vars, "saga", "list")
	if code != 0 || !strings.Contains(out, "ok-1") || !strings.Contains(out, "completed") || !strings.Contains(out, "compensated") {
		t.Fatalf("list: exit %d: %s %s", code, out, stderr)
	}
	if strings.Contains(out, "\x1b") {
		t.Fatalf("list printed a raw escape: %q", out)
	}
	code, out, _ = runCmd(t, vars, "saga", "list", "--state", "compensated", "--json")
	var list []sagaJSON
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].ID != "bad-1" ||
		!strings.Contains(list[0].LastError, "card declined") {
		t.Fatalf("list --state compensated --json: exit %d: %s", code, out)
	}
	code, out, stderr = runCmd(t, vars, "saga", "show", "bad-1")
	for _, want := range []string{"saga bad-1 (pay): compensated", "hold", "charge", "undo", "applied", "failed"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("show: exit %d, missing %q: %s %s", code, want, out, stderr)
		}
	}
	code, out, _ = runCmd(t, vars, "saga", "show", "--json", "ok-1")
	var shown []sagaJSON
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || len(shown) != 1 || len(shown[0].StepRecords) != 2 ||
		shown[0].StepRecords[1].Key != "saga/ok-1/charge/do" || shown[0].StepRecords[1].Effect == nil ||
		shown[0].StepRecords[1].Result != `{"id":"ch_1"}` {
		t.Fatalf("show --json: exit %d: %s", code, out)
	}
	if code, _, stderr := runCmd(t, vars, "saga", "show", "nope"); code != 1 || !strings.Contains(stderr, "not found") {
		t.Fatalf("show of an unknown id: exit %d %q", code, stderr)
	}
}

// TestSagaCommandUsageAndReadOnly: usage errors exit 2 on one line, -h
// prints the usage, and a mistyped SQLite path creates nothing.
func TestSagaCommandUsageAndReadOnly(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"saga"}, {"saga", "fly"}, {"saga", "list", "x"}, {"saga", "show"}, {"saga", "list", "--state", "lost"},
		{"saga", "list", "--limit", "0"}, {"saga", "--bogus", "list"}, {"saga", "list", "--bogus"},
	} {
		code, _, stderr := runCmd(t, map[string]string{}, args...)
		if code != 2 {
			t.Errorf("%q: exit %d (%q), want 2", args, code, stderr)
		}
		assertOneLine(t, strings.Join(args, " "), stderr)
	}
	if code, out, _ := runCmd(t, map[string]string{}, "saga", "list", "-h"); code != 0 || !strings.Contains(out, "show") {
		t.Fatalf("saga -h: exit %d %q", code, out)
	}
	for _, line := range [][]string{{"saga", "list"}, {"saga", "show", "x"}} {
		dir := filepath.Join(t.TempDir(), "typo")
		path := filepath.Join(dir, "idem.db")
		args := append(slices.Clone(line), "--db", "sqlite://"+path)
		code, _, stderr := runCmd(t, map[string]string{}, args...)
		if code != 1 || !strings.Contains(stderr, "no database at "+path) {
			t.Errorf("%q: exit %d %q", args, code, stderr)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%q created %s", args, dir)
		}
	}
}
