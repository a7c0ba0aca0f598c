// Package idemtestcase holds the services idemtest's own tests run it on:
// correct handlers it must pass and deliberately wrong ones it must catch,
// each with the words its report must contain. The core module's tests run
// them on SQLite and PostgreSQL; the idem command module's
// (internal/crosstest/idemtest) run every one on MariaDB too. It is not
// part of idem's API.
package idemtestcase

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/store"
)

// Recorder is a testing.TB that records failures instead of failing, so a
// test can assert that idemtest fails, and how. Methods it does not
// override go to the real test (TempDir, Context, Name…).
type Recorder struct {
	testing.TB
	mu       sync.Mutex
	errors   []string
	cleanups []func()
}

// NewRecorder returns a Recorder over t; its cleanups run when t ends.
func NewRecorder(t *testing.T) *Recorder {
	r := &Recorder{TB: t}
	t.Cleanup(r.runCleanups)
	return r
}

// Helper does nothing: the recorded lines name no caller.
func (r *Recorder) Helper() {}

// Errorf records a failure.
func (r *Recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// Fatalf records a failure (idemtest returns after it).
func (r *Recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...) }

// Logf drops the line: the checks' progress is not what a test of idemtest
// reads, its failures are.
func (r *Recorder) Logf(string, ...any) {}

// Cleanup registers f to run when the real test ends.
func (r *Recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *Recorder) runCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// Failed reports whether a failure was recorded.
func (r *Recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errors) > 0
}

// Report is every recorded failure, in order.
func (r *Recorder) Report() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.errors, "\n")
}

// MustPass fails t when idemtest failed what is a correct handler.
func (r *Recorder) MustPass(t *testing.T) {
	t.Helper()
	if r.Failed() {
		t.Fatalf("idemtest failed a correct handler:\n%s", r.Report())
	}
}

// MustFailWith checks that idemtest failed and that its report contains
// every one of wants.
func (r *Recorder) MustFailWith(t *testing.T, wants ...string) {
	t.Helper()
	out := r.Report()
	if out == "" {
		t.Fatalf("idemtest passed a handler it must catch")
	}
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("idemtest's report lacks %q:\n%s", w, out)
		}
	}
	t.Logf("idemtest's report:\n%s", out)
}

// Q adapts a statement's $n placeholders to the dialect (MySQL takes ?).
func Q(d store.Dialect, s string) string {
	if d == store.Postgres || d == store.SQLite {
		return s
	}
	for i := 9; i >= 1; i-- {
		s = strings.ReplaceAll(s, fmt.Sprintf("$%d", i), "?")
	}
	return s
}

// Payments is the HTTP service under test: POST /payments charges an
// amount once per idempotency key, writes the payment row and queues a
// receipt e-mail. Mailer counts e-mails sent straight from the handler
// (the wrong way); the correct handler queues them in the mails table.
type Payments struct {
	Mailer atomic.Int64 // e-mails sent outside any transaction
}

func (p *Payments) setup(ctx context.Context, db idemtest.DB) error {
	for _, s := range []string{
		`CREATE TABLE payments (idem_key VARCHAR(255) NOT NULL, amount INTEGER NOT NULL)`,
		`CREATE TABLE mails (idem_key VARCHAR(255) NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// invariant: one payment row per key, and one receipt per payment (queued
// in mails or sent by the mailer).
func (p *Payments) invariant(ctx context.Context, db idemtest.DB) error {
	var key string
	var n int
	err := db.QueryRowContext(ctx, `SELECT idem_key, COUNT(*) FROM payments GROUP BY idem_key HAVING COUNT(*) <> 1`).Scan(&key, &n)
	if err == nil {
		return fmt.Errorf("key %s has %d payment rows, want 1", key, n)
	}
	if err != sql.ErrNoRows {
		return err
	}
	var pays, mails int
	if err := db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM payments), (SELECT COUNT(*) FROM mails)`).Scan(&pays, &mails); err != nil {
		return err
	}
	if sent := int(p.Mailer.Load()) + mails; sent != pays {
		return fmt.Errorf("%d receipt e-mails sent for %d payments", sent, pays)
	}
	return nil
}

// Service is the payments service on b with handler.
func (p *Payments) Service(b idemtest.Backend, handler func(env idemtest.Env) http.Handler) idemtest.Service {
	return idemtest.Service{Backend: b, Setup: p.setup, Invariant: p.invariant, Handler: handler}
}

type payRequest struct {
	Amount int `json:"amount"`
}

// Pay is the correct handler: every write on the request transaction.
func Pay(env idemtest.Env) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		var req payRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tx, ok := idemhttp.SQLTx(ctx)
		if !ok {
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		key := idemhttp.Key(ctx)
		if _, err := tx.ExecContext(ctx, Q(env.DB.Dialect, `INSERT INTO payments (idem_key, amount) VALUES ($1, $2)`), key, req.Amount); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if _, err := tx.ExecContext(ctx, Q(env.DB.Dialect, `INSERT INTO mails (idem_key) VALUES ($1)`), key); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		Created(w, key, req.Amount)
	}
}

// Created answers 201 with the payment.
func Created(w http.ResponseWriter, key string, amount int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"payment":%q,"amount":%d}`+"\n", key, amount)
}

// PayCase is the case every payments check sends.
var PayCase = idemtest.Case{Name: "create payment", Path: "/payments", Body: `{"amount": 1200}`, Status: http.StatusCreated}

// Mux serves h at pattern.
func Mux(pattern string, h http.Handler) http.Handler {
	m := http.NewServeMux()
	m.Handle(pattern, h)
	return m
}

// Deposits is the consumer under test: each message deposits an amount;
// its payload carries the producer's own reference as "id". Mailer counts
// notifications sent outside any transaction (the wrong way).
type Deposits struct {
	Mailer atomic.Int64
}

type deposit struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func (p *Deposits) setup(ctx context.Context, db idemtest.DB) error {
	_, err := db.ExecContext(ctx, `CREATE TABLE deposits (message_id VARCHAR(255) NOT NULL, amount INTEGER NOT NULL)`)
	return err
}

// invariant: one deposit row per applied message, keyed by its id, and
// nothing else; one notification per deposit at most queued or sent.
func (p *Deposits) invariant(ctx context.Context, db idemtest.DB, applied []idem.Message) error {
	for _, m := range applied {
		var n int
		if err := db.QueryRowContext(ctx, Q(db.Dialect, `SELECT COUNT(*) FROM deposits WHERE message_id = $1`), m.ID).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("message %s has %d deposit rows, want 1", m.ID, n)
		}
	}
	var total int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM deposits`).Scan(&total); err != nil {
		return err
	}
	if total != len(applied) {
		return fmt.Errorf("%d deposit rows for %d applied messages", total, len(applied))
	}
	if sent := int(p.Mailer.Load()); sent != 0 && sent != len(applied) {
		return fmt.Errorf("%d notifications sent for %d deposits", sent, len(applied))
	}
	return nil
}

// Consumer is the deposits consumer on b with handler h.
func (p *Deposits) Consumer(b idemtest.Backend, h func(env idemtest.ConsumerEnv) inbox.Handler[*sql.Tx]) idemtest.Consumer {
	return idemtest.Consumer{Backend: b, Setup: p.setup, Invariant: p.invariant, Handler: h}
}

// ApplyDeposit is the correct handler: the row on tx, keyed by msg.ID.
func ApplyDeposit(env idemtest.ConsumerEnv) inbox.Handler[*sql.Tx] {
	return func(ctx context.Context, tx *sql.Tx, msg idem.Message) error {
		var d deposit
		if err := json.Unmarshal(msg.Payload, &d); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, Q(env.DB.Dialect, `INSERT INTO deposits (message_id, amount) VALUES ($1, $2)`), msg.ID, d.Amount)
		return err
	}
}

// DepositMsgs are the messages every deposits check delivers.
var DepositMsgs = []idem.Message{
	{ID: "m1", Subject: "deposits", Payload: []byte(`{"id":"ref-1","amount":10}`)},
	{ID: "m2", Subject: "deposits", Payload: []byte(`{"id":"ref-2","amount":20}`)},
	{ID: "m3", Subject: "deposits", Payload: []byte(`{"id":"ref-3","amount":30}`)},
}
