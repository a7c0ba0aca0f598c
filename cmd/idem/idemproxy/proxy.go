// Package idemproxy puts the Idempotency-Key contract in front of any HTTP
// service, whatever its language: a reverse proxy
// (net/http/httputil.ReverseProxy) whose configured routes go through
// idemhttp's two-phase mode. A new key commits an in_progress record with a
// lease, the request is forwarded with its Idempotency-Key (so the
// upstream can hand it to its own providers), and the upstream's answer is
// recorded fenced by the record's token; a retry replays it with
// "Idempotent-Replayed: true", a changed payload answers 422, a duplicate
// while the first is executing answers 409 (or waits and replays). Every
// decision goes through the primary key of idemhttp's idempotency_keys
// table, so several proxy instances share one database safely, and the
// records are the ones "idem keys show", "idem gc", the console's held-work
// view and the idem_table_rows gauge already cover.
//
// What is never stored: 5xx answers, timeouts and connection errors. A
// connection error before the request reached the upstream answers 502
// problem+json and releases the key (nothing happened; the retry
// executes). When the request had been sent and the answer never came
// (the upstream crashed or the connection broke mid-request, or the lease
// ran out), nobody knows whether the effect happened: the proxy answers
// 502 (504 for a timeout), records no response and leaves the key in progress
// (idemhttp.KeepPending); after its lease the route's ExpiredPolicy
// decides — re-execute once (the upstream gets the same key again), or
// hold it for an operator.
//
// Responses are buffered until recorded (idemhttp: MaxResponseMemory in
// memory, the rest in a private temporary file streamed to the client); a
// body above MaxStoredBody is sent in full but stored as omitted (its
// replay carries "Idempotent-Body-Omitted: true" with the status and the
// replay headers, e.g. Location).
//
// Access: on a route whose tenant is a JWT claim, every request the route
// matches — keyed or not, whatever its method — has its token verified
// before anything else, and answers 401 without reaching the upstream
// when it does not verify. A route matches the spellings of its path that
// upstreams commonly read as the same route (letter case, a trailing
// slash, matrix parameters, encoded slashes; see [Proxy.ServeHTTP])
// unless Route.ExactPath is set. The headers a route reads the request's
// scope from (the tenant header or the token's header, Idempotency-Key,
// Content-Type and FingerprintHeaders) reach the upstream as the proxy
// read them, whatever the client's Connection header names.
package idemproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/httpserver"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/problem"
	"github.com/idemkit/idem/store"
)

// Problem types of the proxy's own answers (application/problem+json).
const (
	problemBase = "https://pkg.go.dev/github.com/idemkit/idem/idemproxy#"
	// TypeUpstreamUnavailable: the upstream could not be reached; the
	// request was not sent and nothing was recorded (502).
	TypeUpstreamUnavailable = problemBase + "TypeUpstreamUnavailable"
	// TypeUpstreamOutcomeUnknown: the request was sent but the connection
	// broke before the answer; nothing was recorded and the key stays
	// in progress until its lease ends, then the route's expired-lease policy
	// decides (502).
	TypeUpstreamOutcomeUnknown = problemBase + "TypeUpstreamOutcomeUnknown"
	// TypeUpstreamTimeout: no answer within the route's lease; handled like
	// TypeUpstreamOutcomeUnknown (504).
	TypeUpstreamTimeout = problemBase + "TypeUpstreamTimeout"
	// TypeShuttingDown: the proxy stopped while the request was in flight
	// (503). Under the re-execute policy its key was released (the retry
	// executes); under hold it stays in progress for the policy.
	TypeShuttingDown = problemBase + "TypeShuttingDown"
)

// Observer receives the proxy's contract events for shared metrics;
// *idemmetrics.Metrics implements it. label is the route's operation name
// (or its pattern when it has none).
type Observer interface {
	// DuplicateContext counts a replayed duplicate (component "proxy"),
	// with the trace of ctx as exemplar.
	DuplicateContext(ctx context.Context, component, label string)
	// FingerprintConflict counts a key reused with another payload (422).
	FingerprintConflict(component, label string)
}

// Config configures a Proxy.
type Config struct {
	// Upstream is the service behind the proxy (required), e.g.
	// http://127.0.0.1:9000. Its path, if any, prefixes every request's.
	Upstream *url.URL
	// Routes get the Idempotency-Key contract; other requests are
	// forwarded untouched. No routes means one catch-all route: every POST
	// and PATCH needs a key, scoped by method and path (with a warning).
	Routes []Route
	// MaxBodyBytes caps a keyed request's body (413 above it); default 1 MiB.
	MaxBodyBytes int64
	// MaxStoredBody caps a stored response body; larger ones are sent in
	// full and stored as omitted. Default 1 MiB.
	MaxStoredBody int
	// MaxResponseMemory is the part of a response held in memory while it
	// is recorded; the rest is spilled to a temporary file. Default 1 MiB.
	MaxResponseMemory int
	// Transport carries requests to the upstream. Defaults to a clone of
	// http.DefaultTransport with up to 256 idle connections.
	Transport http.RoundTripper
	// Logger receives warnings, upstream errors and key decisions.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Metrics, when set, counts replays as idem_duplicates_suppressed_total
	// {component="proxy"} and 422s as idem_fingerprint_conflicts_total
	// (an *idemmetrics.Metrics).
	Metrics Observer
	// Registerer, when set, receives the proxy's own metrics:
	//
	//	idem_proxy_requests_total        (operation, outcome)  executed|replayed|rejected|passthrough
	//	idem_proxy_upstream_errors_total (operation, kind)     unavailable|outcome_unknown|timeout|shutdown
	//	idem_proxy_in_flight                                   requests being served
	Registerer prometheus.Registerer
	// TracerProvider supplies the idem.http spans. Defaults to the global one.
	TracerProvider trace.TracerProvider
	// Now is the clock of key records (tests). Defaults to time.Now.
	Now func() time.Time
}

// Proxy is the reverse proxy. It is an http.Handler, safe for concurrent use.
type Proxy struct {
	mux      *http.ServeMux
	routes   map[string]*routeEntry // by pattern in mux
	variants *variants              // the routes' path variants
	pass     http.Handler           // requests no route matches
	rp       *httputil.ReverseProxy
	log      *slog.Logger
	metrics  Observer // nil: none
	warnings []string

	abort      context.Context
	cancel     context.CancelFunc
	inflight   sync.WaitGroup
	reqs       *prometheus.CounterVec
	upErrs     *prometheus.CounterVec
	inflightG  prometheus.Gauge
	closedOnce sync.Once
}

// New builds a proxy storing its key records through d (migrations
// applied: idemhttp's idempotency_keys table). Configuration errors wrap
// idem.ErrInvalidOption.
func New[TTx any](d store.Driver[TTx], cfg Config) (*Proxy, error) {
	if cfg.Upstream == nil || cfg.Upstream.Host == "" || (cfg.Upstream.Scheme != "http" && cfg.Upstream.Scheme != "https") {
		return nil, checks.Optionf("idemproxy: Upstream must be an http:// or https:// URL with a host")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns, t.MaxIdleConnsPerHost = 512, 256
		cfg.Transport = t
	}
	p := &Proxy{mux: http.NewServeMux(), log: obs.Component(cfg.Logger, "idemproxy"), metrics: cfg.Metrics}
	p.abort, p.cancel = context.WithCancel(context.Background())
	p.reqs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_proxy_requests_total",
		Help: "Requests through idem proxy by operation and outcome (executed, replayed, rejected, passthrough)."},
		[]string{"operation", "outcome"})
	p.upErrs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_proxy_upstream_errors_total",
		Help: "Upstream calls without an answer, by kind (unavailable, outcome_unknown, timeout, shutdown)."},
		[]string{"operation", "kind"})
	p.inflightG = prometheus.NewGauge(prometheus.GaugeOpts{Name: "idem_proxy_in_flight", Help: "Requests idem proxy is serving."})
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{p.reqs, p.upErrs, p.inflightG} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("idemproxy: register metrics: %w", err)
			}
		}
	}
	upstream := *cfg.Upstream
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&upstream)
			pr.SetXForwarded()
			keepScopeHeaders(pr.In, pr.Out.Header)
			if idemhttp.Key(pr.In.Context()) != "" {
				notReplayable(pr.Out)
			}
			// The upstream call continues the request's trace (the
			// idem.http span) when there is one.
			if sc := trace.SpanContextFromContext(pr.In.Context()); sc.IsValid() {
				obs.Propagator.Inject(pr.In.Context(), propagation.HeaderCarrier(pr.Out.Header))
			}
		},
		Transport:    cfg.Transport,
		ErrorHandler: p.upstreamError,
		ErrorLog:     slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	}
	routes := cfg.Routes
	if len(routes) == 0 {
		routes = []Route{{Path: "/"}}
		p.warn("no routes configured: every POST and PATCH needs an Idempotency-Key, and keys are scoped by method and path (give --route or --config with stable operation names)")
	}
	p.routes, p.variants = map[string]*routeEntry{}, newVariants()
	entries := make([]*routeEntry, len(routes))
	for i, rt := range routes {
		h, err := buildRoute(p, d, cfg, rt)
		if err != nil {
			return nil, err
		}
		if err := register(p.mux, rt.pattern(), h); err != nil {
			return nil, err
		}
		entries[i] = &routeEntry{h: h, exact: rt.ExactPath}
		p.routes[rt.pattern()] = entries[i]
	}
	// Every route's own variants first, then the trailing-slash forms that
	// no route names itself.
	for _, slash := range []bool{false, true} {
		for i, rt := range routes {
			if rt.ExactPath {
				continue
			}
			if err := p.variants.add(rt, entries[i], slash); err != nil {
				return nil, err
			}
		}
	}
	p.pass = p.instrument("passthrough", p.forward(idem.Retake))
	return p, nil
}

func register(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = checks.Optionf("idemproxy: route %q: %v", pattern, v)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

func (p *Proxy) warn(msg string, args ...any) {
	s := fmt.Sprintf(msg, args...)
	p.warnings = append(p.warnings, s)
	p.log.Warn(s)
}

// Warnings returns the configuration warnings New logged (default
// operation names, a shared tenant), for a command to print.
func (p *Proxy) Warnings() []string { return append([]string(nil), p.warnings...) }

func buildRoute[TTx any](p *Proxy, d store.Driver[TTx], cfg Config, rt Route) (http.Handler, error) {
	op := rt.Operation
	opFn := func(*http.Request) string { return op }
	label := op
	if op == "" {
		label = rt.pattern()
		switch {
		case rt.Method != "" && !strings.HasSuffix(rt.Path, "/"):
			op = rt.pattern()
			p.warn("route %q has no operation name: its keys are scoped by %q, so renaming the route starts a fresh key space (set operation in --config, or --route '%s=NAME')", rt.pattern(), op, rt.pattern())
		default:
			opFn = func(r *http.Request) string { return r.Method + " " + r.URL.Path }
			p.warn("route %q has no operation name: its keys are scoped by the method and the request path", rt.pattern())
		}
	}
	tenant := func(*http.Request) (string, error) { return "", nil }
	// The headers the route reads the request's scope and fingerprint
	// from (the body's media type among them) reach the upstream as read,
	// whatever Connection names.
	scope := append([]string{idemhttp.HeaderKey, "Content-Type"}, rt.FingerprintHeaders...)
	var gate *jwtVerifier
	switch {
	case rt.Tenant.Header != "" && rt.Tenant.JWT != nil:
		return nil, checks.Optionf("idemproxy: route %q: tenant from a header or a JWT, not both", rt.pattern())
	case rt.Tenant.Header != "":
		h := rt.Tenant.Header
		scope = append(scope, h)
		tenant = func(r *http.Request) (string, error) {
			vs := r.Header.Values(h)
			if len(vs) != 1 || strings.TrimSpace(vs[0]) == "" {
				return "", fmt.Errorf("want exactly one %s header", h)
			}
			return strings.TrimSpace(vs[0]), nil
		}
	case rt.Tenant.JWT != nil:
		v, err := rt.Tenant.JWT.verifier()
		if err != nil {
			return nil, checks.Optionf("idemproxy: route %q: %v", rt.pattern(), err)
		}
		gate, tenant = v, v.verifiedTenant
		scope = append(scope, v.cfg.Header)
	default:
		p.warn("route %q has no tenant source: all clients share one key space (set --tenant-header or a jwt tenant)", rt.pattern())
	}
	for _, h := range scope {
		if isHopByHop(h) {
			return nil, checks.Optionf("idemproxy: route %q: %s is a hop-by-hop header: it never reaches the upstream, so it cannot scope or fingerprint a request", rt.pattern(), h)
		}
	}
	hc := idemhttp.Config{
		Mode:               idemhttp.TwoPhase,
		Tenant:             tenant,
		Operation:          opFn,
		Optional:           rt.Optional,
		MaxBodyBytes:       cfg.MaxBodyBytes,
		FingerprintHeaders: rt.FingerprintHeaders,
		ExcludeFields:      rt.ExcludeFields,
		ExcludeQuery:       rt.ExcludeQuery,
		Retention:          rt.Retention,
		Lease:              rt.Lease,
		WaitForInFlight:    rt.WaitForInFlight,
		ReplayHeaders:      rt.ReplayHeaders,
		MaxStoredBody:      cfg.MaxStoredBody,
		MaxResponseMemory:  cfg.MaxResponseMemory,
		ExpiredPolicy:      rt.ExpiredPolicy,
		Now:                cfg.Now,
		Logger:             cfg.Logger,
		TracerProvider:     cfg.TracerProvider,
	}
	mw, err := idemhttp.New(d, hc)
	if err != nil {
		return nil, fmt.Errorf("idemproxy: route %q: %w", rt.pattern(), err)
	}
	h := mw.Handler(p.forward(rt.ExpiredPolicy))
	if gate != nil {
		h = gate.require(p.log, h)
	}
	return p.instrument(label, withScopeHeaders(scope, h)), nil
}

// notReplayable stops http.Transport from silently sending a keyed request
// a second time. The transport treats a request with an Idempotency-Key
// header and a re-readable body as safe to retry when a reused connection
// breaks after the request was written — but the upstream may have
// executed it before breaking, and that outcome is for the route's
// expired-lease policy to decide (a held key must not be re-executed). A
// body without GetBody (an empty one made non-nil) is not re-sent.
func notReplayable(out *http.Request) {
	out.GetBody = nil
	if out.Body == nil || out.Body == http.NoBody {
		out.Body = io.NopCloser(strings.NewReader(""))
		out.ContentLength = 0
	}
}

// attempt is what the proxy learns about one upstream call.
type attempt struct {
	policy idem.ExpiredLease
	sent   atomic.Bool // the request headers reached the connection
}

type attemptKey struct{}

// forwarded records that a request reached the upstream (for the outcome
// label of requests the middleware let through).
type forwarded struct{ atomic.Bool }

type forwardedKey struct{}

// forward sends the request upstream. A keyed request's upstream call does
// not follow the client's cancellation (a client that gives up must not
// leave an unknown outcome behind: the answer is recorded for its retry);
// it ends with the lease (the middleware's deadline) or with Close.
func (p *Proxy) forward(policy idem.ExpiredLease) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := &attempt{policy: policy}
		ctx := r.Context()
		if fw, ok := ctx.Value(forwardedKey{}).(*forwarded); ok {
			fw.Store(true)
		}
		var cancel context.CancelFunc
		if idemhttp.Key(ctx) != "" {
			if dl, ok := ctx.Deadline(); ok {
				ctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), dl)
			} else {
				ctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
			}
		} else {
			ctx, cancel = context.WithCancel(ctx)
		}
		defer cancel()
		stop := context.AfterFunc(p.abort, cancel)
		defer stop()
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteHeaders: func() { at.sent.Store(true) },
		})
		ctx = context.WithValue(ctx, attemptKey{}, at)
		defer func() {
			if v := recover(); v != nil {
				// The upstream's body broke after its headers: the request
				// surely reached it, the outcome is unknown.
				if v == http.ErrAbortHandler {
					idemhttp.KeepPending(ctx)
					p.upErrs.WithLabelValues(idemhttp.Operation(ctx), "outcome_unknown").Inc()
				}
				panic(v)
			}
		}()
		p.rp.ServeHTTP(w, r.WithContext(ctx))
	})
}

// upstreamError answers a call that got no (complete) answer.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	at, _ := ctx.Value(attemptKey{}).(*attempt)
	sent := at != nil && at.sent.Load()
	prob := &idemhttp.Problem{Key: idemhttp.Key(ctx), Err: err}
	kind := "unavailable"
	var ne net.Error
	switch {
	case p.abort.Err() != nil:
		kind = "shutdown"
		prob.Type, prob.Status, prob.Title = TypeShuttingDown, http.StatusServiceUnavailable, "The proxy is shutting down"
		prob.RetryAfter = time.Second
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		kind = "timeout"
		prob.Type, prob.Status, prob.Title = TypeUpstreamTimeout, http.StatusGatewayTimeout, "The upstream did not answer in time"
	case sent:
		kind = "outcome_unknown"
		prob.Type, prob.Status, prob.Title = TypeUpstreamOutcomeUnknown, http.StatusBadGateway, "The upstream connection broke before the answer"
	default:
		prob.Type, prob.Status, prob.Title = TypeUpstreamUnavailable, http.StatusBadGateway, "The upstream is unavailable"
		prob.Detail = "the request was not sent; nothing was recorded"
	}
	keep := sent && prob.Key != "" && (kind != "shutdown" || at.policy == idem.Hold)
	if keep {
		idemhttp.KeepPending(ctx)
		prob.Detail = "the request reached the upstream but its outcome is unknown; nothing was recorded, and after the key's lease the " +
			PolicyName(at.policy) + " policy applies"
	} else if sent && prob.Key != "" {
		prob.Detail = "the key was released: a retry executes again"
	}
	op := idemhttp.Operation(ctx)
	p.upErrs.WithLabelValues(op, kind).Inc()
	p.log.WarnContext(ctx, "upstream call failed", "kind", kind, "sent", sent, "key_left_pending", keep,
		"operation", op, "method", r.Method, "path", r.URL.Path, "error", err)
	problem.Write(w, prob.Status, prob, prob.RetryAfter)
}

func (p *Proxy) instrument(label string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.inflight.Add(1)
		p.inflightG.Inc()
		defer func() { p.inflightG.Dec(); p.inflight.Done() }()
		ctx, info := idemhttp.WithInfo(r.Context())
		fw := new(forwarded)
		ctx = context.WithValue(ctx, forwardedKey{}, fw)
		sw := &httpserver.StatusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r.WithContext(ctx))
		outcome := "rejected"
		switch {
		case info.Replayed:
			outcome = "replayed"
			if p.metrics != nil {
				p.metrics.DuplicateContext(ctx, "proxy", label)
			}
		case info.Executed:
			outcome = "executed"
		case fw.Load():
			outcome = "passthrough" // forwarded without the contract (no key where none is needed)
		case sw.Status == http.StatusUnprocessableEntity:
			if p.metrics != nil {
				p.metrics.FingerprintConflict("proxy", label)
			}
		}
		p.reqs.WithLabelValues(label, outcome).Inc()
	})
}

// ServeHTTP implements http.Handler. A request that matches a route goes
// through its contract; every other one is forwarded as it came (no 405
// for another method on a route's path, no redirect of an unclean path).
// An unclean path that would match a route once cleaned ("//orders",
// "/x/../orders") is redirected to the clean one, as http.ServeMux does,
// so it cannot slip past the route's contract.
//
// Path variants: many upstreams read other spellings of a path as the same
// route — another letter case (/Orders), a trailing slash (/orders/),
// matrix parameters (/orders;x=1), an encoded slash (/orders%2F) — where
// http.ServeMux sees another path. Unless the route sets ExactPath, such a
// request gets the route's contract (its key rule, tenant, operation and
// token check) and is forwarded with its path as sent; a variant takes
// precedence over a less specific route that matches the spelling as
// written (a catch-all with an optional key does not swallow /Orders).
// The matched form is the decoded path with matrix parameters removed from
// every segment, in lower case, cleaned (dot segments and repeated
// slashes removed); a route's literal segments are compared in lower case
// and a path without a trailing slash also takes PATH/.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, pattern := p.mux.Handler(r)
	if e := p.routes[pattern]; e != nil {
		if !e.exact {
			if v := p.variants.match(r); v != nil && v != e {
				v.h.ServeHTTP(w, r)
				return
			}
		}
		h.ServeHTTP(w, r) // the route, or the mux's redirect to its clean path
		return
	}
	if c := cleanPath(r.URL.Path); c != r.URL.Path {
		r2 := *r
		u := *r.URL
		u.Path, u.RawPath = c, ""
		r2.URL = &u
		if _, pat := p.mux.Handler(&r2); p.routes[pat] != nil {
			h.ServeHTTP(w, r) // the mux's redirect to the clean path
			return
		}
	}
	if v := p.variants.match(r); v != nil {
		v.h.ServeHTTP(w, r)
		return
	}
	p.pass.ServeHTTP(w, r)
}

// cleanPath is http.ServeMux's canonical path: path.Clean, keeping a
// trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// Close cancels every upstream call still in flight and waits (bounded by
// ctx) until their requests are answered: a keyed call cancelled this way
// is released under the re-execute policy (the retry executes; the
// upstream sees the same key) and left in progress under hold. Call it after
// http.Server.Shutdown gave in-flight requests their grace period.
func (p *Proxy) Close(ctx context.Context) error {
	p.closedOnce.Do(p.cancel)
	done := make(chan struct{})
	go func() { p.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown stops srv, which serves p, gracefully: in-flight requests get
// grace to finish (their answers are recorded as usual). Requests still
// running then have their upstream calls cancelled — a keyed call's key is
// released under the re-execute policy and left in progress under hold — and
// their 503 answers get up to drain to reach the clients before srv
// closes. It returns an error only when something was still running after
// drain (its key is then recovered after its lease).
func (p *Proxy) Shutdown(srv *http.Server, grace, drain time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	err := srv.Shutdown(ctx)
	cancel()
	if err == nil {
		p.closedOnce.Do(p.cancel)
		return nil
	}
	dctx, dcancel := context.WithTimeout(context.Background(), drain)
	defer dcancel()
	cerr := p.Close(dctx)
	// A second Shutdown waits for the cancelled requests' connections to
	// finish writing their answers and go idle.
	serr := srv.Shutdown(dctx)
	_ = srv.Close()
	if cerr != nil || serr != nil {
		return fmt.Errorf("idemproxy: requests still running %s after their upstream calls were cancelled", drain)
	}
	return nil
}
