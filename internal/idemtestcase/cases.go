package idemtestcase

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/fakeprovider"
)

// Check is one run of idemtest on a backend, judged: a correct handler it
// must pass or a wrong one it must catch with a report that names the
// fault.
type Check func(t *testing.T, b idemtest.Backend)

// Catches are the deliberately wrong handlers, by name: idemtest must fail
// each with a report that names its fault, on every backend.
var Catches = []struct {
	Name  string
	Check Check
}{
	{"HTTPEmailOutsideTransaction", HTTPEmailOutsideTransaction},
	{"HTTPCounterBeforeClaim", HTTPCounterBeforeClaim},
	{"HTTPWriteOnSecondConnection", HTTPWriteOnSecondConnection},
	{"HTTPRouteWithoutMiddleware", HTTPRouteWithoutMiddleware},
	{"InboxMessageIDFromPayload", InboxMessageIDFromPayload},
	{"InboxNotificationOutsideTransaction", InboxNotificationOutsideTransaction},
	{"EffectProviderCallWithoutLedgerKey", EffectProviderCallWithoutLedgerKey},
}

// HTTPPasses: the correct payments handler passes.
func HTTPPasses(t *testing.T, b idemtest.Backend) {
	var p Payments
	rec := NewRecorder(t)
	idemtest.HTTP(rec, p.Service(b, func(env idemtest.Env) http.Handler {
		return Mux("POST /payments", env.Idempotent(Pay(env)))
	}), PayCase, idemtest.Case{Path: "/payments", Body: `{"amount": 5}`})
	rec.MustPass(t)
}

// HTTPEmailOutsideTransaction: the receipt e-mail is sent from the
// handler, outside the transaction: a rolled-back attempt has sent it, and
// its retry sends it again.
func HTTPEmailOutsideTransaction(t *testing.T, b idemtest.Backend) {
	var p Payments
	rec := NewRecorder(t)
	idemtest.HTTP(rec, p.Service(b, func(env idemtest.Env) http.Handler {
		return Mux("POST /payments", env.Idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			tx, _ := idemhttp.SQLTx(ctx)
			key := idemhttp.Key(ctx)
			if _, err := tx.ExecContext(ctx, Q(env.DB.Dialect, `INSERT INTO payments (idem_key, amount) VALUES ($1, 1)`), key); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			p.Mailer.Add(1) // the bug: an e-mail is not rolled back
			Created(w, key, 1)
		})))
	}), PayCase)
	rec.MustFailWith(t, "process crashed after the handler's writes", "receipt e-mails sent for",
		"not a write on the request transaction", "an e-mail")
}

// HTTPCounterBeforeClaim: a charge counter in front of the middleware
// counts every request, replays included.
func HTTPCounterBeforeClaim(t *testing.T, b idemtest.Backend) {
	var p Payments
	rec := NewRecorder(t)
	idemtest.HTTP(rec, p.Service(b, func(env idemtest.Env) http.Handler {
		inner := env.Idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			tx, _ := idemhttp.SQLTx(ctx)
			if _, err := tx.ExecContext(ctx, Q(env.DB.Dialect, `INSERT INTO payments (idem_key, amount) VALUES ($1, 1)`), idemhttp.Key(ctx)); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			Created(w, idemhttp.Key(ctx), 1)
		}))
		return Mux("POST /payments", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.Mailer.Add(1) // the bug: before the key is claimed
			inner.ServeHTTP(w, r)
		}))
	}), PayCase)
	rec.MustFailWith(t, `scenario "sequential retry"`, "2 receipt e-mails sent for 1 payments", "in front of env.Idempotent")
}

// HTTPWriteOnSecondConnection: the payment is written on a second
// connection (env.DB) instead of the request transaction: on SQLite the
// write waits for the transaction's lock and fails; on PostgreSQL and
// MySQL it commits alone and a retry after a rolled-back attempt pays
// twice.
func HTTPWriteOnSecondConnection(t *testing.T, b idemtest.Backend) {
	var p Payments
	rec := NewRecorder(t)
	idemtest.HTTP(rec, p.Service(b, func(env idemtest.Env) http.Handler {
		return Mux("POST /payments", env.Idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			tx, _ := idemhttp.SQLTx(ctx)
			key := idemhttp.Key(ctx)
			// the bug: env.DB, not tx
			if _, err := env.DB.ExecContext(ctx, Q(env.DB.Dialect, `INSERT INTO payments (idem_key, amount) VALUES ($1, 1)`), key); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if _, err := tx.ExecContext(ctx, Q(env.DB.Dialect, `INSERT INTO mails (idem_key) VALUES ($1)`), key); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			Created(w, key, 1)
		})))
	}), PayCase)
	if b.PostgresURL == "" && b.Open == nil { // SQLite
		rec.MustFailWith(t, "attempt 1 answered 500", "a write on another connection")
		return
	}
	rec.MustFailWith(t, "process crashed after the handler's writes", "receipt e-mails sent for", "a write on another connection (env.DB)")
}

// HTTPRouteWithoutMiddleware: a route that is not behind the middleware
// executes every retry.
func HTTPRouteWithoutMiddleware(t *testing.T, b idemtest.Backend) {
	var p Payments
	rec := NewRecorder(t)
	idemtest.HTTP(rec, p.Service(b, func(env idemtest.Env) http.Handler {
		return Mux("POST /payments", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			Created(w, r.Header.Get(idemhttp.HeaderKey), 1)
		}))
	}), PayCase)
	rec.MustFailWith(t, `scenario "sequential retry"`, "want a replay of attempt 1", "behind env.Idempotent")
}

// InboxPasses: the correct deposits handler passes.
func InboxPasses(t *testing.T, b idemtest.Backend) {
	var p Deposits
	rec := NewRecorder(t)
	idemtest.Inbox(rec, p.Consumer(b, ApplyDeposit), DepositMsgs...)
	rec.MustPass(t)
}

// InboxMessageIDFromPayload: the handler records the producer's reference
// from the payload as the message id, instead of the envelope's msg.ID.
func InboxMessageIDFromPayload(t *testing.T, b idemtest.Backend) {
	var p Deposits
	rec := NewRecorder(t)
	idemtest.Inbox(rec, p.Consumer(b, func(env idemtest.ConsumerEnv) inbox.Handler[*sql.Tx] {
		return func(ctx context.Context, tx *sql.Tx, msg idem.Message) error {
			var d deposit
			if err := json.Unmarshal(msg.Payload, &d); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, Q(env.DB.Dialect, `INSERT INTO deposits (message_id, amount) VALUES ($1, $2)`), d.ID, d.Amount) // the bug
			return err
		}
	}), DepositMsgs...)
	rec.MustFailWith(t, `scenario "in order"`, "has 0 deposit rows, want 1", "not on an id read from the payload")
}

// InboxNotificationOutsideTransaction: the notification is sent from the
// handler, outside the transaction: a delivery rolled back at commit has
// sent it, the redelivery sends it again.
func InboxNotificationOutsideTransaction(t *testing.T, b idemtest.Backend) {
	var p Deposits
	rec := NewRecorder(t)
	idemtest.Inbox(rec, p.Consumer(b, func(env idemtest.ConsumerEnv) inbox.Handler[*sql.Tx] {
		apply := ApplyDeposit(env)
		return func(ctx context.Context, tx *sql.Tx, msg idem.Message) error {
			if err := apply(ctx, tx, msg); err != nil {
				return err
			}
			p.Mailer.Add(1) // the bug
			return nil
		}
	}), DepositMsgs...)
	rec.MustFailWith(t, "redelivery after the commit failed", "notifications sent for", "an effect outside the inbox's transaction")
}

// SendReceipt is the correct call: the ledger's key is the provider's
// idempotency key.
func SendReceipt(p *fakeprovider.Client) effect.CallFunc {
	return func(ctx context.Context, key string) ([]byte, error) {
		return p.Send(ctx, key, []byte(`{"to":"ada@example.com","template":"receipt"}`))
	}
}

// EffectPasses: the correct call passes.
func EffectPasses(t *testing.T, b idemtest.Backend) {
	rec := NewRecorder(t)
	idemtest.Effect(rec, idemtest.EffectCall{Backend: b, Call: SendReceipt})
	rec.MustPass(t)
}

// EffectProviderCallWithoutLedgerKey: the call makes up its own
// idempotency key per attempt instead of using the ledger's: a re-call
// after a crash is a second e-mail.
func EffectProviderCallWithoutLedgerKey(t *testing.T, b idemtest.Backend) {
	rec := NewRecorder(t)
	idemtest.Effect(rec, idemtest.EffectCall{Backend: b, Call: func(p *fakeprovider.Client) effect.CallFunc {
		return func(ctx context.Context, key string) ([]byte, error) {
			own := fmt.Sprintf("receipt-%d", time.Now().UnixNano()) // the bug
			return p.Send(ctx, own, []byte(`{"to":"ada@example.com","template":"receipt"}`))
		}
	}})
	rec.MustFailWith(t, `scenario "crash between the provider call and the record"`,
		"the provider performed 3 effect(s) for 2 intended", "a key of its own")
}
