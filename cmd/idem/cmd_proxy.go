package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/idemproxy"
	"github.com/idemkit/idem/cmd/idem/internal/dsn"
	"github.com/idemkit/idem/idemmetrics"
	"github.com/idemkit/idem/internal/httpserver"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
)

// listFlag is a repeatable string flag (--route A --route B).
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ", ") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// runProxy puts the two-phase Idempotency-Key contract in front of any HTTP
// service: "idem proxy --upstream URL --addr ADDR --db URL [--config FILE]
// [--route 'POST /orders' …] [--tenant-header X-Tenant-ID]".
func runProxy(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "proxy", "--upstream URL [--addr 127.0.0.1:8080] [--db URL] [--config FILE] [--route 'POST /orders [exact][=OPERATION]' …] [--tenant-header X-Tenant-ID]")
	upstream := fs.String("upstream", "", "the HTTP service behind the proxy, e.g. http://127.0.0.1:9000 (or upstream: in --config)")
	addr := fs.String("addr", "127.0.0.1:8080", "listen address (HTTP/1.1 and h2c)")
	dbURL := fs.String("db", "", "database URL: postgres://…, mysql://… or sqlite://path (default $IDEM_DATABASE_URL or "+defaultDatabaseURL+"); migrations are applied")
	configFile := fs.String("config", "", "routes file, JSON or YAML (per-route operation, key, tenant, fingerprint exclusions, retention, lease, expired_lease, replay_headers, exact_path)")
	var routes listFlag
	fs.Var(&routes, "route", "route with a required key, 'METHOD /path' or 'METHOD /path=OPERATION' (stable operation name); it also guards the path's variants (/Orders, /orders/, /orders;x=1, /orders%2F) unless 'METHOD /path exact[=OPERATION]'; repeatable")
	tenantHeader := fs.String("tenant-header", "", "request header holding the tenant of --route routes (and of --config routes without a tenant)")
	lease := fs.Duration("lease", 0, "lease of --route routes: the longest upstream call; a key whose lease ended is recovered by --expired-lease (default 30s)")
	expired := fs.String("expired-lease", "re-execute", "policy of --route routes for a key whose upstream call never answered: re-execute or hold")
	wait := fs.Duration("wait", 0, "how long a duplicate of an executing key waits to replay instead of answering 409 (--route routes)")
	maxStored := fs.Int("max-stored-body", 0, "largest response body stored for replay; larger ones are sent in full and stored as omitted (default 1 MiB)")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (default: off)")
	grace := fs.Duration("shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long in-flight requests may finish before their upstream calls are cancelled")
	tracing := addTraceFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	policy, err := idemproxy.ParsePolicy(*expired)
	if err != nil {
		return fmt.Errorf("%w: --expired-lease %q: want re-execute or hold", errUsage, *expired)
	}
	if *lease < 0 || *wait < 0 || *maxStored < 0 || *grace < 0 {
		return fmt.Errorf("%w: --lease, --wait, --max-stored-body and --shutdown-timeout must not be negative", errUsage)
	}
	var cfg idemproxy.Config
	if *configFile != "" {
		fc, rs, err := idemproxy.LoadConfig(*configFile, env.Getenv)
		if err != nil {
			return fmt.Errorf("%w: %s", errUsage, strings.TrimPrefix(err.Error(), idem.ErrInvalidOption.Error()+": "))
		}
		if *upstream == "" {
			*upstream = fc.Upstream
		}
		cfg.MaxBodyBytes, cfg.MaxStoredBody = fc.MaxBodyBytes, fc.MaxStoredBody
		for i := range rs {
			if rs[i].Tenant.Header == "" && rs[i].Tenant.JWT == nil {
				rs[i].Tenant.Header = *tenantHeader
			}
		}
		cfg.Routes = rs
	}
	for _, s := range routes {
		r, err := idemproxy.ParseRoute(s)
		if err != nil {
			return fmt.Errorf("%w: --route: %s", errUsage, strings.TrimPrefix(err.Error(), idem.ErrInvalidOption.Error()+": "))
		}
		r.Tenant.Header, r.Lease, r.ExpiredPolicy, r.WaitForInFlight = *tenantHeader, *lease, policy, *wait
		cfg.Routes = append(cfg.Routes, r)
	}
	if len(routes) == 0 && *configFile == "" && *tenantHeader != "" {
		cfg.Routes = []idemproxy.Route{{Path: "/", Tenant: idemproxy.TenantSource{Header: *tenantHeader}, Lease: *lease, ExpiredPolicy: policy, WaitForInFlight: *wait}}
	}
	if *maxStored > 0 {
		cfg.MaxStoredBody = *maxStored
	}
	if *upstream == "" {
		return fmt.Errorf("%w: --upstream is required (e.g. --upstream http://127.0.0.1:9000)", errUsage)
	}
	up, err := url.Parse(*upstream)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return fmt.Errorf("%w: --upstream must be an http:// or https:// URL with a host", errUsage)
	}
	cfg.Upstream = up
	u := databaseURL(env, *dbURL)
	target, err := parseDatabaseURL(u)
	if err != nil {
		return err
	}
	if env.CheckOnly {
		return nil
	}

	log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.Logger = log
	tp, stopTracing, err := tracing.setup(ctx, "idem-proxy")
	if err != nil {
		return err
	}
	defer func() { _ = stopTracing() }()
	cfg.TracerProvider = tp
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := idemmetrics.New(reg, idemmetrics.Options{})
	if err != nil {
		return err
	}
	cfg.Metrics, cfg.Registerer = m, reg

	var (
		p     *idemproxy.Proxy
		close func() error
	)
	if target.Dialect == store.Postgres {
		if _, err := url.Parse(target.Conn); err != nil {
			return fmt.Errorf("%w: the PostgreSQL URL does not parse", errUsage)
		}
		d, err := dsn.OpenPgx(ctx, target, dsn.Options{MaxConns: proxyPoolConns})
		if err != nil {
			return hideURL(err, u)
		}
		close = d.Close
		p, err = startProxyStore(ctx, d, cfg, reg)
		if err != nil {
			_ = close()
			return hideURL(err, u)
		}
	} else {
		d, err := openSQL(ctx, u, true)
		if err != nil {
			return err
		}
		close = d.Close
		p, err = startProxyStore(ctx, d, cfg, reg)
		if err != nil {
			_ = close()
			return err
		}
	}
	defer func() { _ = close() }()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", *addr, err)
	}
	srv := httpserver.New("", p)
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	served := make(chan error, 2)
	go func() { served <- srv.Serve(ln) }()
	var msrv *http.Server
	var mln net.Listener
	if *metricsAddr != "" {
		mln, err = net.Listen("tcp", *metricsAddr)
		if err != nil {
			_ = srv.Close()
			return fmt.Errorf("listen %s: %w", *metricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
		msrv = httpserver.New("", mux)
		go func() { served <- msrv.Serve(mln) }()
	}

	w := env.Stdout
	fmt.Fprintf(w, "idem proxy is running at http://%s (HTTP/1.1 and h2c)\n", ln.Addr())
	fmt.Fprintf(w, "  upstream: %s\n", redact.URL(*upstream))
	fmt.Fprintf(w, "  database: %s\n", describeDB(u, ""))
	if msrv != nil {
		fmt.Fprintf(w, "  metrics:  http://%s/metrics\n", mln.Addr())
	}
	if d := tracing.describe(); d != "" {
		fmt.Fprintf(w, "  traces:   %s\n", d)
	}
	for _, r := range cfg.Routes {
		fmt.Fprintf(w, "  route %s\n", describeRoute(r))
	}
	if len(cfg.Routes) == 0 {
		fmt.Fprintf(w, "  route every POST and PATCH (key required, operation = method and path, one shared tenant)\n")
	}
	for _, warning := range p.Warnings() {
		fmt.Fprintf(env.Stderr, "idem proxy: warning: %s\n", termSafe(warning))
	}
	fmt.Fprintf(w, "Press Ctrl-C to stop.\n")

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
		if errors.Is(serveErr, http.ErrServerClosed) {
			serveErr = nil
		}
	}
	fmt.Fprintf(w, "shutting down: in-flight requests have %s to finish\n", *grace)
	// Requests still running after the grace have their upstream calls
	// cancelled: their keys are released (re-execute) or left pending for
	// the hold policy.
	if err := p.Shutdown(srv, *grace, 10*time.Second); err != nil {
		fmt.Fprintf(env.Stderr, "idem proxy: %s; their keys are recovered after their lease\n", termSafe(err.Error()))
	}
	if msrv != nil {
		_ = msrv.Close()
	}
	return serveErr
}

func startProxyStore[TTx any](ctx context.Context, d store.Driver[TTx], cfg idemproxy.Config, reg *prometheus.Registry) (*idemproxy.Proxy, error) {
	if err := migrate.Up(ctx, d); err != nil {
		return nil, err
	}
	reg.MustRegister(idemmetrics.NewDBCollector(d, idemmetrics.DBConfig{Logger: cfg.Logger}))
	p, err := idemproxy.New(d, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", errUsage, strings.TrimPrefix(err.Error(), idem.ErrInvalidOption.Error()+": "))
	}
	return p, nil
}

// proxyPoolConns is the default size of idem proxy's PostgreSQL pool
// (pgx's own default is four connections on a small machine, which
// serialises a busy proxy); pool_max_conns in the URL overrides it.
const proxyPoolConns = 32

func describeRoute(r idemproxy.Route) string {
	pat := r.Path
	if r.Method != "" {
		pat = r.Method + " " + r.Path
	}
	op := r.Operation
	if op == "" {
		op = "(default: " + pat + ")"
	}
	key := "required"
	if r.Optional {
		key = "optional"
	}
	tenant := "shared"
	switch {
	case r.Tenant.Header != "":
		tenant = "header " + r.Tenant.Header
	case r.Tenant.JWT != nil:
		claim := r.Tenant.JWT.Claim
		if claim == "" {
			claim = "sub"
		}
		tenant = "jwt claim " + claim
	}
	lease := r.Lease
	if lease == 0 {
		lease = 30 * time.Second // idemhttp.Config.Lease's default
	}
	exact := ""
	if r.ExactPath {
		exact = ", exact path"
	}
	return termSafe(fmt.Sprintf("%s: operation %s, key %s, tenant %s, lease %s, expired lease: %s%s", pat, op, key, tenant, lease, idemproxy.PolicyName(r.ExpiredPolicy), exact))
}
