// Package idemtest proves, in go test, that a team's own handlers are
// effectively-once under retries, duplicates and faults:
//
//	func TestPaymentsOnce(t *testing.T) {
//		idemtest.HTTP(t, idemtest.Service{
//			Setup: createTables, // func(ctx, idemtest.DB) error
//			Handler: func(env idemtest.Env) http.Handler {
//				return mux("POST /payments", env.Idempotent(payHandler)) // writes on idemhttp.SQLTx
//			},
//			Invariant: onePaymentPerKey, // func(ctx, idemtest.DB) error
//		}, idemtest.Case{Path: "/payments", Body: `{"amount":1200}`, Status: 201})
//	}
//
// HTTP runs the user's handler behind idemhttp in transactional mode, on a
// fresh, migrated SQLite file by default (the test binary links the
// driver: import _ "modernc.org/sqlite"; PostgreSQL or MySQL/MariaDB with
// [Backend]), and sends for each case: the request and its retry (a
// replay), concurrent duplicates (one execution), a response lost as the
// server writes it and the retry (a replay of it, byte for byte), the
// request failed at each step of the middleware's transaction (BEGIN, a
// crash after the handler's writes, the record, COMMIT) and retried, the
// same key with another body (422), and a client that hangs up as the
// handler returns and retries. After every step it runs the user's
// invariant, such as "one payment row per key" or "as many receipts as
// payments", and counts the handler's executions: a replay, a 422 or a
// failed BEGIN must not run it. Faults are injected by a wrapper of the
// store driver: idemhttp itself is unchanged.
//
// [Inbox] does the same for a consumer handler run through the inbox
// (duplicates, redelivery after a failed commit or a failure after the
// handler's writes, out-of-order and concurrent deliveries, two messages
// with one payload), its invariant seeing the messages applied. [Effect]
// runs an external call guarded by the effect ledger against a fake
// provider (its client and API in package idemtest/fakeprovider): a crash
// between the provider call and the record, a lease that expires mid-run;
// the provider's own count is the invariant.
//
// A failure tells a story: the scenario, each attempt and its answer, how
// many times the handler ran, what the invariant saw, and what to change
// (an e-mail sent outside the transaction, a counter in front of the
// middleware, a write on a second connection, a message id read from the
// payload, a provider called without the ledger's key…).
//
// The checks take a few seconds on SQLite. The handler's transaction is
// a *sql.Tx on every backend (sqlstore on SQLite and on PostgreSQL through
// pgx's database/sql adapter, the MySQL driver on MariaDB).
package idemtest
