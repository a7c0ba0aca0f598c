// Package console is idem's operator console: server-rendered HTML pages
// (html/template, assets embedded, no CDN, readable without JavaScript) on
// the tables of one idem database, where an operator sees what is stuck and
// acts on it.
//
// Pages (under Config.Prefix, default /console):
//
//	/console/          overview: counts per table and state, outbox lag,
//	                   parked events, dead letters per consumer, held keys
//	                   and effects, held sagas, duplicates and fingerprint conflicts,
//	                   with charts of the last hour sampled by the console
//	/console/dlq       dead letters, filterable; redrive, discard, and both
//	                   for every letter matching the filter
//	/console/dlq/{id}  one letter's full context; redrive, discard, edit and
//	                   redrive as a new revision ([dlq.Store.Revise])
//	/console/held      HTTP keys, effects and sagas held for
//	                   reconciliation; resolve as completed or release,
//	                   with a reason (a held saga: its failed
//	                   compensation, through the effect ledger; the saga
//	                   resumes). Without the sagas table (0008_sagas) the
//	                   saga section is omitted
//	/console/keys      look up an HTTP idempotency key; forget it
//	/console/outbox    parked outbox events per ordering key and what is
//	                   blocked behind them; retry or discard
//	/console/audit     every operator action: who, when, what, why
//
// Safety: every page needs the token (Config.Token), sent as
// "Authorization: Bearer <token>" or through the login form at
// /console/login, which sets an HttpOnly, SameSite=Strict cookie signed with
// the token. Every state-changing request passes
// [http.CrossOriginProtection] and, with Config.ReadOnly, is refused. Every
// action is written to the audit log (table audit_log, migration
// 0006_audit) before it runs and its outcome after, so an action is never
// taken without a record. All output goes through html/template; control
// characters are shown as escapes and header values whose names look
// secret are masked.
//
// What happens on crash, retry and duplicate is that of the library call
// behind each action (dlq, effect, idemhttp, outbox): a redrive or discard
// of a letter that is no longer parked is refused, so a double-submitted
// form never acts twice.
package console

import (
	"cmp"
	"context"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/sqlmeta"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/saga"
	"github.com/idemkit/idem/store"
)

//go:embed templates/*.html assets/*
var embedded embed.FS

// Config configures a Console.
type Config struct {
	// Token is the secret every request must present (Bearer header or the
	// login form's cookie). Required, at least MinTokenLen characters; use
	// 16 or more random bytes (idem console generates 24).
	Token string
	// ReadOnly refuses every state-changing request (403) and hides the
	// action forms.
	ReadOnly bool
	// Publisher republishes redriven and revised dead letters. Without one
	// the redrive actions answer that no broker is configured.
	Publisher broker.Publisher
	// Gatherer, if set, is read for idem_duplicates_suppressed_total and
	// idem_fingerprint_conflicts_total (the counters of the processes that
	// share it, e.g. the demo's registry). Without one those numbers are
	// shown as unavailable: they live in each consumer's own /metrics.
	Gatherer prometheus.Gatherer
	// Prefix is the path the console is served under. Defaults to
	// "/console"; must start with "/" and not end with one.
	Prefix string
	// SampleInterval is how often [Console.Run] samples the overview's
	// numbers for its charts (the last hour is kept). Defaults to 15s.
	SampleInterval time.Duration
	// SecureCookie sets the Secure attribute on the login cookie even on
	// plain HTTP requests (behind a TLS-terminating proxy). It is always set
	// on TLS requests.
	SecureCookie bool
	// Describe, if set, is a line about where the console is connected
	// (shown on the overview). It must not hold secrets: pass URLs through
	// a redactor first.
	Describe string
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// Logger receives one line per operator action. Defaults to slog.Default().
	Logger *slog.Logger
}

// MinTokenLen is the shortest token New accepts.
const MinTokenLen = 16

// Console serves the operator console of one idem database. Create it with
// [New]; serve [Console.Handler]; run [Console.Run] for the charts. It is
// safe for concurrent use.
type Console[TTx any] struct {
	d       store.Driver[TTx]
	cfg     Config
	tokenH  [32]byte
	dlq     *dlq.Store[TTx]
	ledger  *effect.Ledger[TTx]
	outbox  *outbox.Outbox[TTx]
	sagas   *saga.Sagas[TTx] // read only (no definitions); used when the sagas table exists
	pages   map[string]*template.Template
	assets  fs.FS
	log     *slog.Logger
	handler http.Handler

	mu      sync.Mutex // protects samples
	samples []sample
}

// New returns the console of d's database, which must be migrated
// (including 0006_audit for the audit log).
func New[TTx any](d store.Driver[TTx], cfg Config) (*Console[TTx], error) {
	if d == nil {
		return nil, checks.Optionf("console: nil driver")
	}
	if len(cfg.Token) < MinTokenLen {
		return nil, checks.Optionf("console: Config.Token is required, at least %d characters", MinTokenLen)
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, "/console")
	if !strings.HasPrefix(cfg.Prefix, "/") || strings.HasSuffix(cfg.Prefix, "/") {
		return nil, checks.Optionf("console: Config.Prefix %q must start with / and not end with /", cfg.Prefix)
	}
	cfg.SampleInterval = cmp.Or(cfg.SampleInterval, 15*time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Console[TTx]{d: d, cfg: cfg, tokenH: sha256.Sum256([]byte(cfg.Token)), log: obs.Component(cfg.Logger, "idem.console")}
	var err error
	if c.dlq, err = dlq.New(d, dlq.Config{Now: cfg.Now, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	if c.ledger, err = effect.New(d, effect.Config{Now: cfg.Now, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	if c.outbox, err = outbox.New(d, outbox.Config{Now: cfg.Now, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	if c.sagas, err = saga.New(d, c.ledger, saga.Config{Now: cfg.Now, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	if c.pages, err = parsePages(); err != nil {
		return nil, err
	}
	if c.assets, err = fs.Sub(embedded, "assets"); err != nil {
		return nil, err
	}
	c.handler = c.routes()
	return c, nil
}

// Handler returns the console's HTTP handler. Mount it so that it sees the
// full path (e.g. mux.Handle("/console/", c.Handler())).
func (c *Console[TTx]) Handler() http.Handler { return c.handler }

// Run samples the overview's numbers every Config.SampleInterval until ctx
// is done (then it returns nil). A failed sample is logged and skipped.
func (c *Console[TTx]) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.SampleInterval)
	defer t.Stop()
	for {
		if _, err := c.Sample(ctx); err != nil && ctx.Err() == nil {
			c.log.WarnContext(ctx, "console: sample failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// now is the console's clock.
func (c *Console[TTx]) now() time.Time { return c.cfg.Now() }

func (c *Console[TTx]) path(p string) string { return c.cfg.Prefix + p }

func tableExists[TTx any](ctx context.Context, d store.Driver[TTx], name string) (bool, error) {
	return sqlmeta.TableExists(ctx, d, name)
}

// errReadOnly answers a state-changing request in read-only mode.
var errReadOnly = errors.New("the console runs read-only (--read-only): no action is allowed")

// errRevisionDropped marks a revision the broker dropped as a duplicate of
// the one published before, with which the letter was resolved: a
// conflict, not an outage.
var errRevisionDropped = errors.New("the letter's revision was published before with another payload")

// errNoPublisher answers a redrive without a broker.
var errNoPublisher = errors.New("no broker is configured: start the console with --nats to redrive")

// statusOf maps an action's error to an HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, errReadOnly):
		return http.StatusForbidden
	case errors.Is(err, idem.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, idem.ErrInvalidInput), errors.Is(err, errBadForm), errors.Is(err, dlq.ErrRetentionOverstated):
		return http.StatusBadRequest
	case errors.Is(err, dlq.ErrNotParked), errors.Is(err, dlq.ErrRedriveRefused), errors.Is(err, dlq.ErrRevisionPending), errors.Is(err, errRevisionDropped), errors.Is(err, effect.ErrNotRetryable), errors.Is(err, outbox.ErrNotParkedEvent),
		errors.Is(err, errNotHeld), errors.Is(err, errSagaNotHeld), errors.Is(err, idem.ErrInProgress):
		return http.StatusConflict
	case errors.Is(err, errNoPublisher), errors.Is(err, dlq.ErrDroppedAsDuplicate):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// errBadForm reports a form field that is missing or malformed.
var errBadForm = errors.New("bad form")

func badForm(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadForm, fmt.Sprintf(format, args...))
}
