package idemtest_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/idemtestcase"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"
)

func TestInboxPassesCorrectHandler(t *testing.T) { eachBackend(t, idemtestcase.InboxPasses) }

func TestInboxCatchesMessageIDFromPayload(t *testing.T) {
	eachBackend(t, idemtestcase.InboxMessageIDFromPayload)
}

func TestInboxCatchesNotificationOutsideTransaction(t *testing.T) {
	eachBackend(t, idemtestcase.InboxNotificationOutsideTransaction)
}

// racingStore is a SQLite store whose claim of an already recorded message
// fails, by fail's decision, instead of answering that it is a duplicate:
// what a store under concurrent writers does when a racing copy times out
// on a busy database or a lock. claim counts the claims of one message id;
// only the concurrent scenario delivers one message more than three times,
// so a decision on claims above three hits its racing copies (and their
// redeliveries).
type racingStore struct {
	idemtest.Store
	fail func(claim int) error

	mu       sync.Mutex
	claims   map[string]int
	failures int
}

// racingBackend opens s on a fresh SQLite file.
func racingBackend(s *racingStore) idemtest.Backend {
	return idemtest.Backend{Open: func(ctx context.Context, t testing.TB) (idemtest.Store, error) {
		d, err := sqlstore.OpenSQLite(filepath.Join(t.TempDir(), "racing.db"), sqlstore.SQLiteConfig{BusyTimeout: 10 * time.Second}, sqlstore.Config{})
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = d.Close() })
		s.Store, s.claims = d, map[string]int{}
		return s, nil
	}}
}

func (s *racingStore) Tx(tx *sql.Tx) store.Querier { return racingQuerier{s.Store.Tx(tx), s} }

// maxClaims is the most claims one message id received.
func (s *racingStore) maxClaims() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.claims {
		n = max(n, c)
	}
	return n
}

type racingQuerier struct {
	store.Querier
	s *racingStore
}

func (q racingQuerier) Exec(ctx context.Context, stmt string, args ...any) (int64, error) {
	if stmt != q.s.Statements().Inbox.Insert {
		return q.Querier.Exec(ctx, stmt, args...)
	}
	id, _ := args[1].(string)
	q.s.mu.Lock()
	q.s.claims[id]++
	claim := q.s.claims[id]
	q.s.mu.Unlock()
	n, err := q.Querier.Exec(ctx, stmt, args...)
	if err != nil || n != 0 {
		return n, err
	}
	if err := q.s.fail(claim); err != nil {
		q.s.mu.Lock()
		q.s.failures++
		q.s.mu.Unlock()
		return 0, err
	}
	return 0, nil
}

var errBusy = errors.New("database is locked (SQLITE_BUSY): injected by the test's store")

// Racing copies that fail with a busy error are redelivered and end as
// duplicates: the check passes, having redelivered each of them once.
func TestInboxRedeliversRacingDeliveriesThatFailedBusy(t *testing.T) {
	testdb.SkipWithoutSQLite(t)
	s := &racingStore{fail: func(claim int) error {
		if claim > 3 && claim <= idemtest.Concurrency { // racing copies only, not their redeliveries
			return errBusy
		}
		return nil
	}}
	var p idemtestcase.Deposits
	rec := idemtestcase.NewRecorder(t)
	idemtest.Inbox(rec, p.Consumer(racingBackend(s), idemtestcase.ApplyDeposit), idemtestcase.DepositMsgs...)
	rec.MustPass(t)
	if s.failures == 0 {
		t.Fatal("no racing delivery failed: the test's store did not reach the concurrent scenario")
	}
	// The racing copies, one redelivery per failed copy, and the final
	// redelivery of the scenario.
	if got, want := s.maxClaims(), idemtest.Concurrency+s.failures+1; got != want {
		t.Fatalf("the racing message was claimed %d times, want %d (%d racing copies, %d failed and redelivered once, 1 final redelivery)",
			got, want, idemtest.Concurrency, s.failures)
	}
}

// Racing copies that keep failing never end as duplicates: the check
// fails, after redelivering each of them, and says so.
func TestInboxCatchesRacingDeliveriesThatKeepFailing(t *testing.T) {
	testdb.SkipWithoutSQLite(t)
	s := &racingStore{fail: func(claim int) error {
		if claim > 3 {
			return errBusy
		}
		return nil
	}}
	var p idemtestcase.Deposits
	rec := idemtestcase.NewRecorder(t)
	idemtest.Inbox(rec, p.Consumer(racingBackend(s), idemtestcase.ApplyDeposit), idemtestcase.DepositMsgs...)
	rec.MustFailWith(t, `scenario "concurrent deliveries"`, "still failed after 3 redeliveries", "want it to end as duplicate",
		"redelivery 3 of racing delivery", "SQLite's busy timeout")
}

// A racing copy that fails with a permanent error would be dead-lettered
// although its message was processed: the check fails at once, without
// redelivering it. (Before, one processed copy was enough to pass, and the
// scenario's final redelivery, a duplicate, hid the failures.)
func TestInboxCatchesRacingDeliveriesThatFailPermanently(t *testing.T) {
	testdb.SkipWithoutSQLite(t)
	s := &racingStore{fail: func(claim int) error {
		if claim > 3 && claim <= idemtest.Concurrency {
			return idem.Permanent(errors.New("unique violation classified as permanent by the test's store"))
		}
		return nil
	}}
	var p idemtestcase.Deposits
	rec := idemtestcase.NewRecorder(t)
	idemtest.Inbox(rec, p.Consumer(racingBackend(s), idemtestcase.ApplyDeposit), idemtestcase.DepositMsgs...)
	rec.MustFailWith(t, `scenario "concurrent deliveries"`, "failed with an error that is not retried", "dead-letters it")
	if strings.Contains(rec.Report(), "redelivery 1 of racing delivery") {
		t.Errorf("a permanent failure was redelivered:\n%s", rec.Report())
	}
}
