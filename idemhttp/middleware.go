// Package idemhttp is net/http middleware for the Idempotency-Key header
// (draft-ietf-httpapi-idempotency-key-header, with Stripe's semantics): a
// retried POST or PATCH never creates a second effect, a key reused with
// another payload fails loudly, and concurrent duplicates never run the
// handler twice — also across several server instances sharing one
// database, because every decision goes through the primary key of the
// idempotency_keys table (migration 0002).
//
// In transactional mode (the default) the handler writes on the key's own
// transaction, so its rows and the stored response commit together:
//
//	d, err := pgxstore.Open(ctx, dbURL, pgxstore.Config{}) // or sqlstore.OpenSQLite: *sql.Tx
//	if err := migrate.Up(ctx, d); err != nil { … }           // New checks the schema
//	mw, err := idemhttp.New(d, idemhttp.Config{Tenant: tenantOf}) // func(*http.Request) (string, error)
//	if err != nil { … }
//	mux.Handle("POST /orders", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
//		tx, _ := idemhttp.Tx[pgx.Tx](r.Context()) // the key's transaction: never commit it
//		if _, err := tx.Exec(r.Context(), `INSERT INTO orders (id) VALUES ($1)`, newID()); err != nil {
//			http.Error(w, "try again", http.StatusInternalServerError) // 5xx: rolled back, not stored
//			return
//		}
//		w.WriteHeader(http.StatusCreated) // stored; a retry with the key replays it
//	})))
//
// Contract:
//
//	first request with a new key          handler runs; response stored with the record
//	retry, same fingerprint, completed    stored status, body and ReplayHeaders, plus
//	                                      "Idempotent-Replayed: true"; handler not run
//	same key, different fingerprint       422 problem+json; handler not run
//	same key still executing              409 problem+json with Retry-After (or, with
//	                                      Config.WaitForInFlight, wait and replay)
//	key missing on POST/PATCH             400 (unless Config.Optional)
//	key malformed, several key headers    400
//	Config.Tenant fails                   401
//	tenant not storable text              401 (NUL, invalid UTF-8, > MaxTenantLen bytes or the dialect's limit)
//	operation not storable text           400 (NUL, invalid UTF-8, > MaxOperationLen bytes or the dialect's limit)
//	body above Config.MaxBodyBytes        413
//	response > Config.MaxResponseBytes    500; nothing recorded, the retry executes
//	record past its retention             treated as absent: the request executes again
//	GET, HEAD, OPTIONS, TRACE             pass through untouched
//
// The scope of a key is tenant + operation + key: one tenant never receives
// another tenant's stored response. The fingerprint is the SHA-256 of the
// method, the operation, the request target, the media type, the body
// (canonical JSON for JSON content types, so key order and whitespace do
// not matter; raw bytes otherwise) and Config.FingerprintHeaders. The media
// type is the Content-Type without its parameters, lower-cased: the same
// bytes as form data and as text/plain, or as application/merge-patch+json
// and application/json-patch+json, are two requests (422), while
// "application/json; charset=utf-8" equals "Application/JSON". The target is the escaped path
// as the client spelled it (r.URL.EscapedPath(): /accounts/A/charge and
// /accounts/B/charge differ even though they share one route, and so do
// a%2Fb and a%252Fb, and also A and %41 — a client must retry the same
// URL) and the
// query in canonical form: parameters decoded, sorted by name, the values
// of a repeated name kept in their order, so ?b=2&a=1 equals ?a=1&b=2 but
// ?a=1&a=2 differs from ?a=2&a=1 (as do ?a and ?a=1; ?a and ?a= are
// equal, and so are + and %20). A query that does not parse (a bad escape,
// a semicolon) is compared byte for byte. Config.ExcludeQuery leaves named
// parameters (cache busters) out; by default every parameter counts.
//
// Records stored by a version before the target (or, later, the media
// type) was fingerprinted carry the older fingerprint: a retry of such a
// request answers 422 (it is never replayed for another target or media
// type, and never executed twice). That lasts at most Config.Retention
// after the upgrade.
//
// Responses are buffered until they are recorded, in both modes: up to
// Config.MaxResponseMemory in memory, the rest in a private temporary file
// (Config.SpillDir) that is streamed to the client and then removed, so a
// large response does not cost its size in heap. The stored copy obeys
// Config.MaxStoredBody.
//
// A retry of a completed key is answered from one read outside any
// transaction (a completed record never changes until it expires), so
// replays are cheap and take no write lock. Executing always requires
// winning the primary key: INSERT … ON CONFLICT DO NOTHING, a plain INSERT
// of the completed record (pgx), or a takeover UPDATE fenced by the
// record's token.
//
// Errors are RFC 9457 application/problem+json with a stable type URI per
// error (TypeKeyMissing …); Config.ErrorHandler replaces the writer.
//
// In [Transactional] mode (the default) the handler runs inside the
// transaction that holds the key record; it gets it with [Tx] (e.g.
// Tx[pgx.Tx]) or [SQLTx]. The response is buffered and sent only after the
// commit: a crash, panic or 5xx leaves nothing recorded and a retry executes; a
// commit that fails answers 503 with nothing recorded. A handler's panic is
// not swallowed: the middleware rolls the transaction back (in two-phase
// mode it releases the key's claim) and re-raises the panic, so net/http's
// own recovery (or the application's recovery middleware, placed outside
// this one) deals with it. A concurrent
// duplicate blocks on the primary key (PostgreSQL: at most
// Config.LockTimeout; SQLite: BEGIN IMMEDIATE serialises writers) and then
// replays, or answers 409.
//
// With the pgx driver (store.Driver.BeginReserved) a new key costs the
// round trips of the plain handler, three for a handler that runs one
// statement: the key's session advisory lock together with the read of
// its record; BEGIN together with the handler's first statement; the one
// write of the completed record together with COMMIT and the lock's
// release. A replay, a mismatch or an in-flight answer is the first round
// trip alone. A concurrent duplicate waits on the lock (at most
// Config.LockTimeout, then 409) and its read then sees the committed
// record. The lock only serialises: the record's INSERT has no ON
// CONFLICT, so the primary key still decides against any writer that
// does not take the lock (the request is then answered from that writer's
// record and the handler's work rolls back). A record past its retention
// goes from there to the ordinary path, which on pgx holds the same lock
// for its transaction (BEGIN and the lock in one round trip), so that the
// two paths never run one key at once. The pipelined path needs sessions
// whose transactions default to READ COMMITTED (PostgreSQL's default): the
// duplicate's read after its wait must see what the first request
// committed. Under another default_transaction_isolation (for the role,
// the database or the pool's connections), asked once per Middleware by
// its first request and logged at Warn, requests take the ordinary path.
// The session lock also assumes that the pgx connection is one server
// session from the lock to the unlock: behind a transaction-pooling proxy
// (PgBouncer pool_mode=transaction, AWS RDS Proxy, …) it is not, and
// Config.NoSessionLock must be set, on every instance, to take the
// ordinary path. Other drivers take the ordinary path below: the replay
// read, BEGIN, the claim INSERT, the handler, the completion UPDATE,
// COMMIT.
//
// Records live in the idempotency_keys table for Config.Retention (24 h by
// default, per operation with Config.OperationRetention), counted from the
// first request. Expiry is enforced at read time — a record past its
// retention is treated as absent — and "idem gc" deletes such rows. [Lookup]
// and [Forget] (and "idem keys show") give operators access to one record.
//
// In [TwoPhase] mode an in_progress record with a lease is committed before
// the handler runs and completed afterwards; see [Config.ExpiredPolicy] for recovery
// of an abandoned lease, and the fencing token that rejects a zombie's late
// finalisation.
//
// Tracing: every request that carries a key (or lacks a required one) runs
// in an OpenTelemetry span idem.http, a child of the span in its context or
// of the client's traceparent, with idem.decision (executed, replayed,
// mismatch, in_flight, rejected), idem.tenant, idem.operation and
// idem.key_hash (never the raw key); see Config.TracerProvider. The handler
// runs under that span, so the outbox rows it writes continue the trace.
// [Transport] carries the request's key ([DownstreamKey]) and traceparent to
// the services the handler calls.
package idemhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/fingerprint"
	"github.com/idemkit/idem/internal/fpmatch"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/schemacheck"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// Middleware enforces Idempotency-Key semantics in front of handlers. It is
// safe for concurrent use; one Middleware may wrap many handlers (each
// operation is scoped separately).
type Middleware[TTx any] struct {
	d      store.Driver[TTx]
	cfg    Config
	q      *sqlset.HTTPKeys
	log    *slog.Logger
	tr     trace.Tracer
	lockTO string // lockTimeout(cfg.LockTimeout), rendered once
	// iso is what the reserved path knows of the isolation level the
	// pool's sessions begin transactions with (readCommitted): isoUnknown
	// until the first request on that path asked.
	iso atomic.Int32
	// replayNames is cfg.ReplayHeaders sorted, without duplicates.
	replayNames []string
	// maxTenant, maxOperation and maxKey are the longest scope the store
	// holds: the package's limits, or the dialect's where lower.
	maxTenant, maxOperation, maxKey int
}

// within is limit, or the dialect's limit when it declares a lower one
// (0: none).
func within(limit, dialect int) int {
	if dialect > 0 && dialect < limit {
		return dialect
	}
	return limit
}

// New returns a Middleware storing its records through d. Configuration
// errors wrap idem.ErrInvalidOption. The database must be migrated: New
// asks it (reading only) and returns an error wrapping
// migrate.ErrNotMigrated, which says to run `idem migrate up`, when it
// lacks migrations; a database that does not answer yet is not an error
// (requests then get 503, logged).
func New[TTx any](d store.Driver[TTx], cfg Config) (*Middleware[TTx], error) {
	if d == nil {
		return nil, checks.Optionf("idemhttp: nil store driver")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := schemacheck.Ready(d); err != nil {
		return nil, fmt.Errorf("idemhttp: %w", err)
	}
	lim := d.Statements().Limits
	return &Middleware[TTx]{
		d:      d,
		cfg:    cfg,
		q:      &d.Statements().HTTPKeys,
		log:    obs.Component(cfg.Logger, "idemhttp", "mode", cfg.Mode.String()),
		tr:     obs.Tracer(cfg.TracerProvider),
		lockTO: lockTimeout(cfg.LockTimeout),

		replayNames: sortedNames(cfg.ReplayHeaders),

		maxTenant:    within(MaxTenantLen, lim.HTTPTenant),
		maxOperation: within(MaxOperationLen, lim.HTTPOperation),
		maxKey:       within(idem.MaxKeyLen, lim.HTTPKey),
	}, nil
}

// Handler returns h wrapped by the middleware, in the shape of
// func(http.Handler) http.Handler, so it plugs into any router.
func (m *Middleware[TTx]) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, h) })
}

// request is one idempotent request after validation.
type request struct {
	scope
	fp    idem.Fingerprint
	state *reqState
	boxed [3]any // tenant, operation, key as statement arguments

	// Room for what every request needs once, in its own allocation:
	// state points to stateRoom, args hands out disjoint parts of
	// argRoom, and the reserved path reads into recRoom and lists its
	// statements in stmtRoom.
	stateRoom reqState
	argRoom   [18]any
	argUsed   int
	recRoom   Record
	stmtRoom  [3]store.Stmt
}

// args is scope.args with the scope boxed once per request: every
// statement of a request starts with it. The slice is the request's own
// (a part of argRoom no other call gets, capacity its length, so an
// append copies) until the room runs out.
func (r *request) args(more ...any) []any {
	n := 3 + len(more)
	var a []any
	if r.argUsed+n <= len(r.argRoom) {
		a = r.argRoom[r.argUsed : r.argUsed : r.argUsed+n]
		r.argUsed += n
	} else {
		a = make([]any, 0, n)
	}
	a = append(a, r.boxed[:]...)
	return append(a, more...)
}

// outcome is the decision of one attempt that did not execute the handler.
type outcome int

const (
	outExecute     outcome = iota // no decision yet: claim the key
	outDone                       // a response was written
	outReplay                     // rec holds a completed record to replay
	outMismatch                   // fingerprint differs
	outInFlight                   // another execution owns the key
	outHeld                       // needs reconciliation
	outStoreFailed                // err holds the store error
)

func isSafe(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

func (m *Middleware[TTx]) serve(w http.ResponseWriter, r *http.Request, h http.Handler) {
	if isSafe(r.Method) {
		h.ServeHTTP(w, r)
		return
	}
	if len(r.Header.Values(HeaderKey)) == 0 && (m.cfg.Optional || (r.Method != http.MethodPost && r.Method != http.MethodPatch)) {
		h.ServeHTTP(w, r)
		return
	}
	r, span := m.startSpan(r)
	var sc scope
	decision, err := decisionRejected, error(nil)
	defer func() {
		if p := recover(); p != nil { // only the handler panics
			m.cfg.Observer.HTTPRequest(r.Context(), decisionExecuted)
			endSpan(span, decisionExecuted, sc, fmt.Errorf("handler panicked: %v", p))
			panic(p)
		}
		m.cfg.Observer.HTTPRequest(r.Context(), decision)
		endSpan(span, decision, sc, err)
	}()
	decision, err = m.serveKeyed(w, r, h, &sc)
}

// serveKeyed serves a request that carries a key (or needs one) and
// returns the decision, and the store error behind a 503, for the span;
// sc receives the request's scope once it is known.
func (m *Middleware[TTx]) serveKeyed(w http.ResponseWriter, r *http.Request, h http.Handler, sc *scope) (string, error) {
	if len(r.Header.Values(HeaderKey)) == 0 {
		m.fail(w, r, ErrKeyMissing, "", "")
		return decisionRejected, nil
	}
	key, err := ParseKey(r.Header)
	if err == nil && len(key) > m.maxKey {
		err = fmt.Errorf("%w: key of %d characters exceeds %d", ErrKeyInvalid, len(key), m.maxKey)
	}
	if err != nil {
		m.fail(w, r, err, "", err.Error())
		return decisionRejected, nil
	}
	tenant, err := m.cfg.Tenant(r)
	if err != nil {
		m.log.DebugContext(r.Context(), "tenant rejected", "error", err)
		m.fail(w, r, ErrUnauthorized, key, "")
		return decisionRejected, nil
	}
	// Tenant and operation are checked before anything reaches the store:
	// text PostgreSQL cannot hold, or longer than the dialect's columns,
	// would otherwise fail there (a 503 telling the client to retry what
	// can never succeed).
	if err := checkText("tenant", tenant, m.maxTenant); err != nil {
		m.log.InfoContext(r.Context(), "tenant rejected", "error", err)
		m.fail(w, r, fmt.Errorf("%w: %w", ErrUnauthorized, err), key, "")
		return decisionRejected, nil
	}
	op := m.cfg.Operation(r)
	if err := checkText("operation", op, m.maxOperation); err != nil {
		m.log.InfoContext(r.Context(), "operation rejected", "error", err)
		m.fail(w, r, fmt.Errorf("%w: %w", ErrOperationInvalid, err), key, err.Error())
		return decisionRejected, nil
	}
	*sc = scope{tenant, op, key}
	body, err := m.readBody(w, r)
	if err != nil {
		m.fail(w, r, err, key, "")
		return decisionRejected, nil
	}
	if info := infoFrom(r.Context()); info != nil {
		info.Key, info.Tenant, info.Operation = key, tenant, op
	}
	req := &request{scope: scope{tenant, op, key}, boxed: [3]any{tenant, op, key}}
	req.stateRoom.tenant, req.stateRoom.operation, req.stateRoom.key = tenant, op, key
	req.state = &req.stateRoom
	req.fp = m.fingerprint(r, op, body)
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, req.state))
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }

	var waitUntil time.Time
	if m.cfg.WaitForInFlight > 0 {
		waitUntil = time.Now().Add(m.cfg.WaitForInFlight)
	}
	backoff := 10 * time.Millisecond
	for {
		var (
			out outcome
			rec *Record
		)
		out = outExecute
		if m.reserved() {
			out, rec, err = m.attemptReserved(w, r, h, req)
		}
		if out == outExecute {
			out, rec, err = m.peek(r.Context(), req)
		}
		if out == outExecute {
			if m.cfg.Mode == Transactional {
				if m.serialised() {
					out, rec, err = m.attemptSerialised(w, r, h, req)
				}
				if out == outExecute {
					out, rec, err = m.attemptTx(w, r, h, req)
				}
			} else {
				out, rec, err = m.attemptTwoPhase(w, r, h, req)
			}
		}
		switch out {
		case outDone:
			if req.state.executed {
				return decisionExecuted, err
			}
			return decisionRejected, err
		case outReplay:
			m.replay(w, r, req, rec)
			return decisionReplayed, nil
		case outMismatch:
			m.log.InfoContext(r.Context(), "key reused with a different request", "idempotency_key", key, "tenant", tenant, "operation", op,
				"stored", rec.Fingerprint.Short(), "received", req.fp.Short())
			m.fail(w, r, fpmatch.Check(req.scope.String(), rec.Fingerprint[:], req.fp), key, "")
			return decisionMismatch, nil
		case outHeld:
			m.log.WarnContext(r.Context(), "key held for reconciliation", "idempotency_key", key, "tenant", tenant, "operation", op)
			m.fail(w, r, idem.ErrNeedsReconciliation, key, "an earlier execution was abandoned; an operator must resolve this key")
			return decisionRejected, nil
		case outStoreFailed:
			m.log.ErrorContext(r.Context(), "key store failed", "idempotency_key", key, "tenant", tenant, "operation", op, "error", err)
			m.fail(w, r, fmt.Errorf("%w: %w", ErrStoreUnavailable, err), key, "")
			if req.state.executed {
				return decisionExecuted, err
			}
			return decisionRejected, err
		case outInFlight:
			if !waitUntil.IsZero() && time.Now().Add(backoff).Before(waitUntil) {
				t := time.NewTimer(backoff)
				select {
				case <-r.Context().Done():
					t.Stop()
					m.fail(w, r, idem.ErrInProgress, key, "")
					return decisionInFlight, nil
				case <-t.C:
				}
				backoff = min(backoff*2, 200*time.Millisecond)
				continue
			}
			m.log.DebugContext(r.Context(), "key in flight", "idempotency_key", key, "tenant", tenant, "operation", op)
			m.fail(w, r, idem.ErrInProgress, key, "")
			return decisionInFlight, nil
		default: // unreachable: an attempt always decides
			m.fail(w, r, fmt.Errorf("%w: no decision for %s", ErrStoreUnavailable, req.scope), key, "")
			return decisionRejected, nil
		}
	}
}

func (m *Middleware[TTx]) fail(w http.ResponseWriter, r *http.Request, err error, key, detail string) {
	m.cfg.ErrorHandler(w, r, problemFor(err, key, m.cfg.RetryAfter, detail))
}

func (m *Middleware[TTx]) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, ErrBodyTooLarge
		}
		return nil, fmt.Errorf("idemhttp: read body: %w", err)
	}
	return body, nil
}

// fingerprint hashes method, operation, request target (escaped path and
// canonical query), media type, body and the configured headers.
func (m *Middleware[TTx]) fingerprint(r *http.Request, op string, body []byte) idem.Fingerprint {
	// The parts of idem.FingerprintOf, in this order: stored fingerprints
	// depend on it.
	f := fingerprint.New()
	f.AddString(r.Method)
	f.AddString(op)
	if r.URL != nil {
		qtag, q := canonicalQuery(r.URL.RawQuery, m.cfg.ExcludeQuery)
		f.AddString("path")
		f.AddString(r.URL.EscapedPath())
		f.AddString(qtag)
		f.AddString(q)
	}
	ct := r.Header.Get("Content-Type")
	f.AddString("type")
	f.AddString(mediaType(ct))
	if c, err := canonicalBody(ct, body, m.cfg.ExcludeFields); err == nil {
		f.AddString("json")
		f.Add(c)
	} else {
		f.AddString("raw")
		f.Add(body)
	}
	for _, h := range m.cfg.FingerprintHeaders {
		f.AddString(h)
		f.AddString(strings.Join(r.Header.Values(h), "\x00"))
	}
	return f.Sum()
}

// canonicalQuery returns the query in canonical form: parameters decoded,
// those named in exclude dropped, sorted by name, the values of one name
// kept in their order, and re-encoded (url.Values.Encode), so that
// "b=2&a=1" and "a=1&b=2" are one request while "a=1&a=2" and "a=2&a=1"
// are two. A query that does not parse (a bad escape, a semicolon) is
// compared byte for byte, tagged apart so it never equals a parsed one.
func canonicalQuery(raw string, exclude []string) (tag, q string) {
	if raw == "" {
		return "query", "" // what ParseQuery+Encode give, without the map
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return "rawquery", raw
	}
	for _, name := range exclude {
		delete(vals, name)
	}
	return "query", vals.Encode()
}

// mediaType is the media type of a Content-Type header without its
// parameters, trimmed and lower-cased ("Application/JSON; charset=utf-8"
// is "application/json"): the same bytes under another media type (form
// data and text/plain, a JSON merge patch and a JSON patch) are another
// request, while a charset parameter or the case of the type is not. A
// header that is no valid media type is taken the same way, up to its
// first ';'; no header is "".
func mediaType(contentType string) string {
	t, _, _ := strings.Cut(contentType, ";")
	return strings.ToLower(strings.TrimSpace(t))
}

func canonicalBody(contentType string, body []byte, exclude []string) ([]byte, error) {
	if !fingerprint.IsJSONContentType(contentType) {
		return nil, errors.New("not JSON")
	}
	return idem.CanonicalJSON(body, exclude...)
}

func (m *Middleware[TTx]) retention(op string) time.Duration {
	if d, ok := m.cfg.OperationRetention[op]; ok {
		return d
	}
	return m.cfg.Retention
}

// claimStmts are the statements of one claim. In the request transaction
// on a dialect that waits on row locks (PostgreSQL) they are InsertLocked
// and TakeOverLocked, with the lock timeout as the insert's extra argument.
type claimStmts struct {
	insert, takeOver string
	extra            []any // further insert arguments ($8, the lock timeout)
}

// claim makes the request the owner of its key, through the primary key
// and the lease machine (internal/lease): insert an in_progress record, or
// take over one that expired (retention, or a two-phase lease under
// idem.Retake). It returns the fencing token when the request owns the key,
// or the decision for the existing record; under idem.Hold an expired
// lease is first marked failed, fenced by its token.
//
// On PostgreSQL, an INSERT … ON CONFLICT DO NOTHING that returns no row
// means the conflicting transaction has finished; the record is re-read in
// a new statement, and the claim restarts if it vanished meanwhile (GC).
func (m *Middleware[TTx]) claim(ctx context.Context, q store.Querier, req *request, cs claimStmts) (token int64, out outcome, rec *Record, err error) {
	for range 5 {
		now := m.cfg.Now()
		lockedUntil := int64(0)
		if m.cfg.Mode == TwoPhase {
			lockedUntil = store.Micros(now.Add(m.cfg.Lease))
		}
		exp := store.Micros(now.Add(m.retention(req.operation)))
		var ignored string
		args := req.args(req.fp.Bytes(), store.Micros(now), lockedUntil, exp)
		err = q.QueryRow(ctx, cs.insert, append(args, cs.extra...)...).Scan(&token, &ignored)
		if err == nil {
			return token, 0, nil, nil
		}
		if !errors.Is(err, store.ErrNoRows) {
			return 0, errOutcome(err), nil, err
		}
		rec, found, err := load(ctx, q, m.q, req.scope)
		if err != nil {
			return 0, errOutcome(err), nil, err
		}
		if !found {
			continue // deleted between the two statements: insert again
		}
		switch d := m.decide(rec, req.fp, now); {
		case d == lease.Acquire:
			retake := 0
			if m.cfg.Mode == TwoPhase && m.cfg.ExpiredPolicy == idem.Retake {
				retake = 1
			}
			targs := req.args(rec.Token, req.fp.Bytes(), store.Micros(now), lockedUntil, exp, store.Micros(now), retake)
			err = q.QueryRow(ctx, cs.takeOver, targs...).Scan(&token, &ignored)
			if err == nil {
				m.log.InfoContext(ctx, "key taken over", "idempotency_key", req.key, "tenant", req.tenant, "operation", req.operation,
					"previous_state", string(rec.State), "expired", rec.Expired(now), "token", token)
				return token, 0, nil, nil
			}
			if !errors.Is(err, store.ErrNoRows) {
				return 0, errOutcome(err), nil, err
			}
			continue // changed meanwhile: look again
		case d == lease.Held && rec.State == StateInProgress:
			n, err := q.Exec(ctx, m.q.Hold, req.args(rec.Token, store.Micros(now))...)
			if err := lease.Fence(n, err, "idemhttp: hold "+req.scope.String(), rec.Token); err != nil {
				if lease.Lost(err) {
					continue // changed meanwhile: look again
				}
				return 0, errOutcome(err), nil, err
			}
			return 0, outHeld, rec, nil
		default:
			return 0, outcomeOf(d), rec, nil
		}
	}
	return 0, outInFlight, nil, nil
}

func errOutcome(err error) outcome {
	if errors.Is(err, store.ErrLockTimeout) {
		return outInFlight
	}
	return outStoreFailed
}

// decide is the lease machine's decision (lease.Decide) on an existing
// record for a request with fingerprint fp at now. Acquire means the
// request may take the record over. In transactional mode the lease is the
// owner's row lock, not locked_until: a record seen in progress there has
// a live owner (or, under Hold, is held), so only retention expiry is
// taken over.
func (m *Middleware[TTx]) decide(rec *Record, fp idem.Fingerprint, now time.Time) lease.Decision {
	expired := rec.Expired(now)
	d := lease.Decide(lease.Record{
		State:      string(rec.State),
		Token:      rec.Token,
		LeaseUntil: rec.LockedUntil,
		Same:       fpmatch.Same(rec.Fingerprint[:], fp),
		Expired:    expired,
	}, now, m.cfg.ExpiredPolicy)
	if d == lease.Acquire && !expired && m.cfg.Mode != TwoPhase {
		return lease.Busy
	}
	return d
}

// outcomeOf maps a decision other than Acquire to the request's outcome.
func outcomeOf(d lease.Decision) outcome {
	switch d {
	case lease.Done:
		return outReplay
	case lease.Mismatch:
		return outMismatch
	case lease.Held, lease.Ended:
		return outHeld
	}
	return outInFlight
}

// peek is the read-only fast path: one statement outside any transaction.
// A committed completed record is immutable until it expires, so it is
// replayed (or, with another fingerprint, rejected) without a transaction
// or a write lock; a live two-phase lease answers in-flight. Everything
// else — no record, an expired one, an abandoned lease — goes to claim,
// where the primary key decides. A store error here also defers to claim.
func (m *Middleware[TTx]) peek(ctx context.Context, req *request) (outcome, *Record, error) {
	rec, found, err := load(ctx, m.d.Pool(), m.q, req.scope)
	if err != nil || !found {
		return outExecute, nil, nil
	}
	switch d := m.decide(rec, req.fp, m.cfg.Now()); {
	case d == lease.Acquire:
		return outExecute, nil, nil
	case d == lease.Held && rec.State == StateInProgress:
		return outExecute, nil, nil // claim marks it failed, fenced
	default:
		return outcomeOf(d), rec, nil
	}
}

// attemptTx is one transactional attempt: begin, claim, run the handler on
// the transaction, store the response, commit, send.
func (m *Middleware[TTx]) attemptTx(w http.ResponseWriter, r *http.Request, h http.Handler, req *request) (outcome, *Record, error) {
	ctx := r.Context()
	// The transaction follows the client's context only until the handler
	// returns (database/sql rolls a transaction back when its context ends);
	// after that the work is recorded and committed even if the client left.
	txCtx, handlerReturned, cancelTx := untilHandlerReturns(ctx)
	defer cancelTx()
	cs := claimStmts{insert: m.q.Insert, takeOver: m.q.TakeOver}
	if m.q.InsertLocked != "" {
		cs = claimStmts{m.q.InsertLocked, m.q.TakeOverLocked, []any{m.lockTO}}
	}
	var (
		tx            TTx
		token         int64
		began, locked bool
		err           error
	)
	if m.reservedInUse() {
		// The reserved path decides this key under its lock: take it
		// too, with BEGIN, before the claim (beginLocked). A duplicate
		// holding it makes this wait, at most LockTimeout (then 409),
		// and the claim below then finds its record.
		tx, locked, err = m.beginLocked(txCtx, req)
		if err == nil && !locked {
			// The driver declined the one-round-trip BEGIN (a statement
			// it had prepared was dropped, say): BEGIN, then the lock,
			// never the claim without it.
			tx, err = m.beginThenLock(txCtx, req)
			locked = err == nil
		}
	}
	if !locked && err == nil {
		// Fast path (pgx): BEGIN and the key INSERT in one round trip.
		// A key that exists already surfaces as a unique violation
		// there, and the ordinary path below decides what it means.
		tx, token, began, err = m.beginInsert(txCtx, req, cs.extra)
	}
	if err != nil {
		return errOutcome(err), nil, err
	}
	if !began && !locked {
		if tx, err = m.d.Begin(txCtx); err != nil {
			return errOutcome(err), nil, err
		}
	}
	finished := false
	defer func() {
		if !finished {
			_ = m.d.Rollback(context.WithoutCancel(ctx), tx)
		}
	}()
	q := m.d.Tx(tx)
	if !began {
		var out outcome
		var rec *Record
		token, out, rec, err = m.claim(ctx, q, req, cs)
		if err != nil || token == 0 {
			return out, rec, err
		}
	}

	cw := m.newCapture(w)
	defer cw.close()
	m.runOnTx(cw, r, h, req, tx) // a panic propagates; the deferred rollback runs
	handlerReturned()
	cw.finish()
	if failure := cw.failure(); failure != nil || !m.cfg.StoreStatus(cw.status) {
		finished = true
		if err := m.d.Rollback(context.WithoutCancel(ctx), tx); err != nil {
			m.log.WarnContext(ctx, "rollback failed", "idempotency_key", req.key, "error", err)
		}
		if failure != nil {
			return m.unrecordable(w, r, req, failure)
		}
		cw.send()
		return outDone, nil, nil
	}
	// The handler finished: record and commit even if the client has gone
	// meanwhile, so its retry replays instead of executing again.
	bg := context.WithoutCancel(ctx)
	args, err := m.completeArgs(req, token, cw, m.cfg.Now())
	if err != nil {
		return outStoreFailed, nil, err
	}
	if ce := m.d; ce.SupportsPipeline() {
		// pgx: the completion UPDATE and COMMIT in one round trip. The
		// record was inserted by this transaction and stays locked by it,
		// so the UPDATE cannot miss it.
		done, err := ce.ExecCommit(bg, tx, m.q.Complete, args...)
		if done {
			finished = true
			if err != nil {
				return outStoreFailed, nil, fmt.Errorf("commit failed, nothing was recorded: %w", err)
			}
			cw.send()
			return outDone, nil, nil
		}
	}
	n, err := q.Exec(bg, m.q.Complete, args...)
	if err := lease.Fence(n, err, "idemhttp: complete "+req.scope.String(), token); err != nil {
		return outStoreFailed, nil, err // no row: the record vanished before completion
	}
	finished = true
	if err := m.d.Commit(bg, tx); err != nil {
		_ = m.d.Rollback(bg, tx)
		return outStoreFailed, nil, fmt.Errorf("commit failed, nothing was recorded: %w", err)
	}
	cw.send()
	return outDone, nil, nil
}

// untilHandlerReturns returns the request transaction's context: it follows
// the client's ctx until handlerReturned is called, and no longer after
// that, so the work is recorded and committed even if the client left
// (database/sql rolls a transaction back when its context ends). The
// client's cancellation reaches txCtx entirely before handlerReturned
// returns or not at all: a cancel landing later would interrupt the COMMIT
// (database/sql drivers run it on the transaction's context) after the
// server may already have committed, and the middleware would answer
// "nothing was recorded" for a record that is. cancel releases txCtx.
func untilHandlerReturns(ctx context.Context) (txCtx context.Context, handlerReturned, cancel func()) {
	txCtx, cancelTx := context.WithCancel(context.WithoutCancel(ctx))
	var mu sync.Mutex
	returned := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !returned {
			cancelTx()
		}
	})
	handlerReturned = func() {
		stop()
		mu.Lock()
		returned = true
		mu.Unlock()
	}
	return txCtx, handlerReturned, func() { stop(); cancelTx() }
}

// runOnTx runs h, its response captured by cw, with tx as the request's
// transaction (Tx) for its duration.
func (m *Middleware[TTx]) runOnTx(cw *capture, r *http.Request, h http.Handler, req *request, tx TTx) {
	req.state.tx, req.state.hasTx, req.state.txType = tx, true, reflect.TypeFor[TTx]()
	req.state.executed = true
	markExecuted(r.Context())
	h.ServeHTTP(cw, r)
	req.state.tx, req.state.hasTx = nil, false
}

// beginInsert begins the request transaction and inserts an in_progress record
// in one round trip when the driver can (store.Driver.SupportsPipeline). began=false
// means the ordinary path must run; a record that already exists is one
// such case.
func (m *Middleware[TTx]) beginInsert(ctx context.Context, req *request, extra []any) (tx TTx, token int64, began bool, err error) {
	bi := m.d
	if !bi.SupportsPipeline() || m.q.InsertStrict == "" || bi.Names().Layout == store.LayoutPartitioned {
		// The partitioned layout inserts through a function in the
		// database, whose version (and so the token it writes) may not be
		// this binary's: the ordinary claim reads the token back instead.
		return tx, 0, false, nil
	}
	now := m.cfg.Now()
	args := append(req.args(req.fp.Bytes(), store.Micros(now), int64(0), store.Micros(now.Add(m.retention(req.operation)))), extra...)
	tx, inserted, ok, err := bi.BeginInsert(ctx, m.q.InsertStrict, args...)
	if err != nil || !ok || !inserted {
		return tx, 0, false, err
	}
	// InsertStrict's token is the record's created_at (sqlset.HTTPKeys),
	// in the statement this binary sends.
	return tx, store.Micros(now), true, nil
}

// attemptTwoPhase is one two-phase attempt: commit an in_progress record with a
// lease, run the handler outside any transaction, record the response
// fenced by the token, send.
func (m *Middleware[TTx]) attemptTwoPhase(w http.ResponseWriter, r *http.Request, h http.Handler, req *request) (outcome, *Record, error) {
	ctx := r.Context()
	pool := m.d.Pool()
	token, out, rec, err := m.claim(ctx, pool, req, claimStmts{insert: m.q.Insert, takeOver: m.q.TakeOver})
	if err != nil || token == 0 {
		return out, rec, err
	}
	bg := context.WithoutCancel(ctx)
	release := func() {
		// A lost lease has nothing to release: its new owner has the key.
		n, err := pool.Exec(bg, m.q.Release, req.args(token)...)
		if err := lease.Fence(n, err, "idemhttp: release "+req.scope.String(), token); err != nil && !lease.Lost(err) {
			m.log.ErrorContext(bg, "release of in-progress key failed; it is recovered after its lease", "idempotency_key", req.key, "error", err)
		}
	}
	req.state.executed = true
	markExecuted(ctx)
	hctx, cancel := context.WithTimeout(ctx, m.cfg.Lease)
	defer cancel()
	cw := m.newCapture(w)
	defer cw.close()
	func() {
		defer func() {
			if p := recover(); p != nil {
				if !m.keptPending(ctx, req) {
					release()
				}
				panic(p)
			}
		}()
		h.ServeHTTP(cw, r.WithContext(hctx))
	}()
	cw.finish()
	if failure := cw.failure(); failure != nil {
		release()
		return m.unrecordable(w, r, req, failure)
	}
	if !m.cfg.StoreStatus(cw.status) || req.state.keepPending.Load() {
		if !m.keptPending(ctx, req) {
			release()
		}
		cw.send()
		return outDone, nil, nil
	}
	args, err := m.completeArgs(req, token, cw, m.cfg.Now())
	if err != nil {
		release()
		return outStoreFailed, nil, err
	}
	n, err := pool.Exec(bg, m.q.Complete, args...)
	if err := lease.Fence(n, err, "idemhttp: complete "+req.scope.String(), token); err != nil {
		if !lease.Lost(err) {
			return outStoreFailed, nil, err
		}
		m.log.WarnContext(ctx, "lease lost: another execution took the key over; result not recorded",
			"idempotency_key", req.key, "tenant", req.tenant, "operation", req.operation, "token", token)
		m.fail(w, r, idem.ErrLeaseLost, req.key, "")
		return outDone, nil, nil
	}
	cw.send()
	return outDone, nil, nil
}

func markExecuted(ctx context.Context) {
	if info := infoFrom(ctx); info != nil {
		info.Executed = true
	}
}

// unrecordable answers a handler's response that cannot be recorded
// (above MaxResponseBytes, or its spill failed) after the caller rolled
// the handler's work back (transactional) or released the key (two-phase):
// nothing is recorded and the retry executes again.
func (m *Middleware[TTx]) unrecordable(w http.ResponseWriter, r *http.Request, req *request, failure error) (outcome, *Record, error) {
	if errors.Is(failure, ErrResponseTooLarge) {
		m.log.WarnContext(r.Context(), "response not recorded", "idempotency_key", req.key, "tenant", req.tenant,
			"operation", req.operation, "error", failure)
		m.fail(w, r, failure, req.key, failure.Error())
		return outDone, nil, nil
	}
	return outStoreFailed, nil, failure
}

// response is the stored form of a captured response.
type response struct {
	status                   int
	headers                  string // JSON of the ReplayHeaders present
	body                     []byte
	omitted                  int // 1: body above MaxStoredBody, not stored
	resourceType, resourceID string
}

// storedResponse is what is recorded of cw's response.
func (m *Middleware[TTx]) storedResponse(req *request, cw *capture) (response, error) {
	body, ok, err := cw.body(m.cfg.MaxStoredBody)
	if err != nil {
		return response{}, err
	}
	omitted := 0
	skip := keepAll
	if !ok {
		body, omitted = []byte{}, 1
		skip = bodyHeader // they describe the body that is not stored
	}
	if body == nil {
		body = []byte{}
	}
	hj := encodeHeaders(cw.header, m.replayNames, skip)
	req.state.mu.Lock()
	rt, rid := req.state.resourceType, req.state.resourceID
	req.state.mu.Unlock()
	return response{cw.status, hj, body, omitted, rt, rid}, nil
}

func keepAll(string) bool { return false }

func bodyHeader(k string) bool { return k == "Content-Type" || k == "Content-Length" }

func (m *Middleware[TTx]) completeArgs(req *request, token int64, cw *capture, now time.Time) ([]any, error) {
	res, err := m.storedResponse(req, cw)
	if err != nil {
		return nil, err
	}
	return req.args(token, res.status, res.headers, res.body, res.omitted, res.resourceType, res.resourceID,
		store.Micros(now)), nil
}

func (m *Middleware[TTx]) replay(w http.ResponseWriter, r *http.Request, req *request, rec *Record) {
	req.state.replayed = true
	if info := infoFrom(r.Context()); info != nil {
		info.Replayed = true
	}
	if m.log.Enabled(r.Context(), slog.LevelDebug) { // spares the arguments' boxing per replay
		m.log.DebugContext(r.Context(), "replayed stored response", "idempotency_key", req.key, "tenant", req.tenant,
			"operation", req.operation, "status", rec.Status)
	}
	h := w.Header()
	for k, v := range rec.Header {
		h[k] = v
	}
	h.Set(HeaderReplayed, "true")
	if rec.BodyOmitted {
		h.Set(HeaderBodyOmitted, "true")
	}
	w.WriteHeader(rec.Status)
	_, _ = w.Write(rec.Body)
}

// lockTimeout renders d as the lock-timeout argument of InsertLocked
// (milliseconds, at least 1 so that 0 never means "wait forever").
func lockTimeout(d time.Duration) string {
	return fmt.Sprintf("%dms", max(d.Milliseconds(), 1))
}
