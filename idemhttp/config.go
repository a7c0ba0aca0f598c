package idemhttp

import (
	"cmp"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/obs"
)

// Mode selects how the middleware brackets the handler.
type Mode int

const (
	// Transactional (the default) runs the handler inside one database
	// transaction that also holds the key record: the record, the handler's
	// mutations (through [Tx], e.g. Tx[pgx.Tx], or [SQLTx]) and the
	// stored response commit together or not at all, and the response is sent only after the
	// commit. A crash at any point leaves either nothing (the retry executes)
	// or everything (the retry replays).
	Transactional Mode = iota
	// TwoPhase commits an in_progress record with a lease first, runs the handler
	// outside any transaction (external effects, a proxy in front of another
	// service), then records the response. A crash between the two phases
	// leaves an in_progress record that is recovered after its lease by the
	// [Config.ExpiredPolicy]; the key ([Key]) should be propagated downstream so a
	// re-execution is deduplicated there.
	TwoPhase
)

func (m Mode) String() string {
	switch m {
	case Transactional:
		return "transactional"
	case TwoPhase:
		return "two-phase"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Defaults of [Config].
const (
	defaultMaxBodyBytes  = 1 << 20
	defaultMaxStoredBody = 1 << 20
	// defaultMaxResponseMemory is the part of a response body held in
	// memory before the rest is spilled to a temporary file.
	defaultMaxResponseMemory = 1 << 20
	defaultRetention         = 24 * time.Hour
	defaultLockTimeout       = 2 * time.Second
	defaultLease             = 30 * time.Second
	defaultRetryAfter        = 1 * time.Second
)

// Config configures a [Middleware]. The zero value is usable: transactional
// mode, one shared tenant, operation = method + route pattern, key required
// on POST and PATCH.
type Config struct {
	// Mode is Transactional (the default) or TwoPhase.
	Mode Mode

	// Tenant returns the tenant that scopes the key, typically the
	// authenticated principal. An error answers 401 and the handler does
	// not run. Defaults to one shared tenant "" — set it in any service
	// with more than one client, or one client's key could replay
	// another's response. A tenant with NUL, invalid UTF-8 or more than
	// [MaxTenantLen] bytes also answers 401, before the store.
	Tenant func(*http.Request) (string, error)

	// Operation names the operation that scopes the key. Defaults to the
	// method plus r.Pattern (stdlib ServeMux and chi set it when the
	// middleware wraps a route), falling back to the method plus the URL
	// path when the middleware runs before routing. An operation with NUL,
	// invalid UTF-8 or more than [MaxOperationLen] bytes answers 400
	// ([TypeOperationInvalid]), before the store.
	Operation func(*http.Request) string

	// Optional lets POST and PATCH requests without an Idempotency-Key pass
	// through untouched. Defaults to false: they get 400. Other unsafe
	// methods (PUT, DELETE, …) are handled when they carry a key and pass
	// through when they do not. Safe methods (GET, HEAD, OPTIONS, TRACE)
	// always pass through.
	Optional bool

	// MaxBodyBytes caps the request body read for the fingerprint (through
	// http.MaxBytesReader); a larger body answers 413. Defaults to 1 MiB.
	MaxBodyBytes int64

	// FingerprintHeaders lists request headers included in the fingerprint
	// (for example Content-Type or an API version header). Defaults to none.
	FingerprintHeaders []string

	// ExcludeFields lists JSON fields left out of the fingerprint, as
	// top-level names or dotted paths ("metadata.client_time"), for fields
	// that legitimately change between retries.
	ExcludeFields []string

	// ExcludeQuery lists query parameters left out of the fingerprint (for
	// example a cache buster "_"), by exact name. Defaults to none: every
	// parameter counts.
	ExcludeQuery []string

	// Retention is how long a record answers for its key, counted from the
	// request that created it. Defaults to 24h.
	// A record past its retention is treated as absent: a late retry
	// executes again (documented; the GC deletes such rows).
	Retention time.Duration

	// OperationRetention overrides Retention per operation name (as
	// returned by Operation).
	OperationRetention map[string]time.Duration

	// LockTimeout bounds, in transactional mode on PostgreSQL, how long a
	// concurrent duplicate waits on the unique index for the first request
	// to finish (SET LOCAL lock_timeout) before answering 409. Defaults to
	// 2s. On SQLite the wait for the write lock is bounded by the
	// database's busy timeout instead.
	LockTimeout time.Duration

	// NoSessionLock turns off the pipelined path of the pgx driver, which
	// holds a session-level advisory lock on the key across the handler's
	// transaction (see the package documentation): requests take the
	// ordinary transactional path instead, whose claim waits on the
	// primary key (a new key costs one round trip more; a replay is one
	// round trip either way). Set it when the pool reaches PostgreSQL through a
	// transaction-pooling proxy (PgBouncer pool_mode=transaction, AWS RDS
	// Proxy, Supavisor in transaction mode, …): such a proxy may run the
	// lock, the handler's transaction and the unlock on different server
	// connections, so the lock would neither exclude a concurrent
	// duplicate nor be released, and the key would answer 409 until that
	// server connection closed. Set it on every instance that shares the
	// database. Direct connections and session pooling need nothing; nor
	// does a pool in pgx's simple protocol
	// (pgx.QueryExecModeSimpleProtocol), where the pipelined path is off
	// already. Defaults to false.
	NoSessionLock bool

	// Lease is how long a two-phase in_progress record belongs to its owner.
	// The handler's context is cancelled when the lease ends; after it, a
	// retry recovers the record by ExpiredPolicy. Set it above the
	// handler's longest run. Defaults to 30s.
	Lease time.Duration

	// WaitForInFlight, when positive, makes a request that finds its key in
	// flight wait up to this long (polling) for the first request to finish
	// and then replay its response, instead of answering 409 at once.
	// Defaults to 0 (no wait).
	WaitForInFlight time.Duration

	// RetryAfter is the Retry-After sent with 409 in-flight answers.
	// Defaults to 1s (rounded up to whole seconds).
	RetryAfter time.Duration

	// StoreStatus reports whether a response with this status is stored
	// (and, in transactional mode, committed). A status that is not stored
	// rolls the transaction back (two-phase: deletes the in_progress record), so
	// a retry executes again. Defaults to [DefaultStoreStatus].
	StoreStatus func(status int) bool

	// ReplayHeaders lists the response headers stored and replayed.
	// Defaults to Content-Type and Location.
	ReplayHeaders []string

	// MaxStoredBody caps the stored response body. Above it the record
	// keeps the status and replay headers (Location points at the created
	// resource) with an empty body, and the replay carries
	// "Idempotent-Body-Omitted: true" without Content-Type. Defaults to
	// 1 MiB.
	MaxStoredBody int

	// MaxResponseMemory is how much of a response body is held in memory
	// while the middleware waits to send it (after the commit, or after the
	// two-phase completion). Beyond it the body is spilled to a temporary
	// file in SpillDir (created with mode 0600, unlinked at once on POSIX
	// systems and removed after the response is sent on others) and
	// streamed to the client from there; the stored copy still obeys
	// MaxStoredBody. Both modes buffer this way: the response is sent only
	// after it is recorded. Defaults to 1 MiB; values below 512 (the bytes
	// read to sniff a Content-Type) are raised to 512.
	MaxResponseMemory int

	// SpillDir is the directory of spilled response bodies; New checks
	// that it exists. Defaults to os.TempDir().
	SpillDir string

	// MaxResponseBytes caps the response body a handler may write. Beyond
	// it the handler's writes fail with [ErrResponseTooLarge], nothing is
	// recorded (transactional mode rolls the handler's work back; two-phase
	// mode releases the key as after a 5xx) and the client gets 500
	// problem+json ([TypeResponseTooLarge]). Defaults to 0: no cap.
	MaxResponseBytes int64

	// ErrorHandler writes the middleware's own error responses. Defaults to
	// [WriteProblem] (RFC 9457 application/problem+json).
	ErrorHandler func(w http.ResponseWriter, r *http.Request, p *Problem)

	// ExpiredPolicy is the two-phase recovery of an in_progress record
	// whose lease expired (its owner crashed or hung). idem.Retake (the
	// default) lets the next request with the same key and fingerprint take
	// the record over and run the handler again, with the same key
	// available through [Key] for propagation downstream; the previous
	// owner's late finalisation is rejected by the fencing token. idem.Hold
	// marks the record failed and answers 409 "needs reconciliation"
	// ([idem.ErrNeedsReconciliation]) for that key until an operator
	// resolves it or the record's retention passes.
	ExpiredPolicy idem.ExpiredLease

	// Now is the clock used for record timestamps, leases and expiry.
	// Defaults to time.Now.
	Now func() time.Time

	// Logger receives one line per replay, conflict and failure (a store
	// failure, answered 503, at level Error). Defaults to slog.Default(),
	// so a failing store is never silent. Records logged while a span is
	// active carry trace_id and span_id.
	Logger *slog.Logger

	// TracerProvider supplies the tracer of the idem.http span (attributes
	// idem.decision, idem.tenant, idem.operation and idem.key_hash, never
	// the raw key). Defaults to otel.GetTracerProvider(): without an
	// OpenTelemetry SDK installed the spans are no-ops.
	TracerProvider trace.TracerProvider

	// Observer, if set, counts every keyed request by decision (executed,
	// replayed, in_flight, mismatch, rejected: idem_http_requests_total);
	// pass an *idemmetrics.Metrics.
	Observer idem.Observer
}

// DefaultStoreStatus stores 2xx, 3xx and 4xx responses except 400, 401,
// 403, 409, 422 and 429 — those mean the request never started executing
// (Stripe stores none of them), so a corrected request may reuse the key.
// 5xx responses are never stored. 3xx is stored because a 303 See Other
// after a POST is a completed request; not storing it would roll back the
// mutation in transactional mode.
func DefaultStoreStatus(status int) bool {
	switch {
	case status >= 200 && status < 400:
		return true
	case status >= 400 && status < 500:
		switch status {
		case 400, 401, 403, 409, 422, 429:
			return false
		}
		return true
	}
	return false
}

func (c Config) withDefaults() (Config, error) {
	if c.Mode != Transactional && c.Mode != TwoPhase {
		return c, checks.Optionf("idemhttp: unknown Mode %d", c.Mode)
	}
	if !c.ExpiredPolicy.Valid() {
		return c, checks.Optionf("idemhttp: unknown ExpiredPolicy %d", c.ExpiredPolicy)
	}
	for name, d := range map[string]time.Duration{
		"Retention": c.Retention, "LockTimeout": c.LockTimeout, "Lease": c.Lease,
		"WaitForInFlight": c.WaitForInFlight, "RetryAfter": c.RetryAfter,
	} {
		if d < 0 {
			return c, checks.Optionf("idemhttp: %s must not be negative (got %v)", name, d)
		}
	}
	if c.MaxBodyBytes < 0 || c.MaxStoredBody < 0 || c.MaxResponseMemory < 0 || c.MaxResponseBytes < 0 {
		return c, checks.Optionf("idemhttp: MaxBodyBytes, MaxStoredBody, MaxResponseMemory and MaxResponseBytes must not be negative")
	}
	if c.SpillDir != "" {
		if fi, err := os.Stat(c.SpillDir); err != nil || !fi.IsDir() {
			return c, checks.Optionf("idemhttp: SpillDir %q is not a directory", c.SpillDir)
		}
	}
	for op, d := range c.OperationRetention {
		if d <= 0 {
			return c, checks.Optionf("idemhttp: OperationRetention[%q] must be positive (got %v)", op, d)
		}
	}
	if c.Tenant == nil {
		c.Tenant = func(*http.Request) (string, error) { return "", nil }
	}
	if c.Operation == nil {
		c.Operation = DefaultOperation
	}
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, defaultMaxBodyBytes)
	c.MaxStoredBody = cmp.Or(c.MaxStoredBody, defaultMaxStoredBody)
	c.MaxResponseMemory = cmp.Or(c.MaxResponseMemory, defaultMaxResponseMemory)
	c.Retention = cmp.Or(c.Retention, defaultRetention)
	c.LockTimeout = cmp.Or(c.LockTimeout, defaultLockTimeout)
	c.Lease = cmp.Or(c.Lease, defaultLease)
	c.RetryAfter = cmp.Or(c.RetryAfter, defaultRetryAfter)
	if c.StoreStatus == nil {
		c.StoreStatus = DefaultStoreStatus
	}
	if c.ReplayHeaders == nil {
		c.ReplayHeaders = []string{"Content-Type", "Location"}
	}
	hs := make([]string, 0, len(c.ReplayHeaders))
	for _, h := range c.ReplayHeaders {
		hs = append(hs, http.CanonicalHeaderKey(strings.TrimSpace(h)))
	}
	c.ReplayHeaders = hs
	fh := make([]string, 0, len(c.FingerprintHeaders))
	for _, h := range c.FingerprintHeaders {
		fh = append(fh, http.CanonicalHeaderKey(strings.TrimSpace(h)))
	}
	slices.Sort(fh)
	c.FingerprintHeaders = slices.Compact(fh)
	if c.ErrorHandler == nil {
		c.ErrorHandler = WriteProblem
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Observer = obs.Observer(c.Observer)
	return c, nil
}

// DefaultOperation returns the method plus the route pattern (r.Pattern, as
// set by http.ServeMux and chi once routed; a pattern that already starts
// with the method is used as is), or the method plus the URL path when no
// pattern is known.
func DefaultOperation(r *http.Request) string {
	p := r.Pattern
	if p == "" {
		return r.Method + " " + r.URL.Path
	}
	if i := strings.IndexAny(p, " \t"); i > 0 && p[:i] == strings.ToUpper(p[:i]) && !strings.ContainsAny(p[:i], "/.") {
		rest := strings.TrimLeft(p[i:], " \t")
		if p[:i] == r.Method && p[i] == ' ' && len(rest) == len(p)-i-1 {
			return p // already "METHOD /path": no new string per request
		}
		return r.Method + " " + rest
	}
	return r.Method + " " + p
}
