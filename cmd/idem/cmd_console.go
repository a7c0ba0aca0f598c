package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/cmd/idem/console"
	"github.com/idemkit/idem/cmd/idem/internal/dsn"
	"github.com/idemkit/idem/internal/httpserver"
	"github.com/idemkit/idem/internal/redact"
)

// runConsole implements "idem console": the operator console (package
// console) on one database, served at http://ADDR/console/.
func runConsole(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "console", "[--db URL] [--nats URL] [--addr 127.0.0.1:8090] [--token T] [--read-only]")
	dbURL := fs.String("db", "", "database URL (postgres://…, mysql://… or sqlite://path); default $IDEM_DATABASE_URL or "+defaultDatabaseURL)
	addr := fs.String("addr", "127.0.0.1:8090", "HTTP listen address")
	natsURL := fs.String("nats", "", "NATS JetStream URL that redrives republish to (default $IDEM_NATS_URL; without one redrive is disabled)")
	brokerURL := fs.String("broker", "", "the broker URL, same as --nats (nats://…)")
	token := fs.String("token", "", "the console token (default $IDEM_CONSOLE_TOKEN; generated and printed once when neither is set)")
	readOnly := fs.Bool("read-only", false, "refuse every action: look, do not touch")
	secure := fs.Bool("secure-cookie", false, "mark the login cookie Secure (when served behind TLS)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *natsURL != "" && *brokerURL != "" && *natsURL != *brokerURL {
		return fmt.Errorf("%w: give --nats or --broker, not both", errUsage)
	}
	nurl := dlqOr(dlqOr(*natsURL, *brokerURL), env.Getenv("IDEM_NATS_URL"))
	if nurl != "" {
		if err := parseNATSURL(nurl); err != nil {
			return err
		}
	}
	tok, tokenFrom, err := consoleToken(env, *token, "--token")
	if err != nil {
		return err
	}

	if env.CheckOnly {
		return nil
	}
	u := databaseURL(env, *dbURL)
	d, err := openSQL(ctx, u, mustExist)
	if err != nil {
		return err
	}
	defer d.Close()
	if ok, err := console.Installed(ctx, d); err != nil {
		return hideURL(err, u)
	} else if !ok {
		return errors.New("the audit_log table does not exist: run 'idem migrate up' first (the console records every action there)")
	}
	var pub broker.Publisher
	if nurl != "" {
		// The one opener of idem dlq redrive. The console stays on NATS
		// (parseNATSURL above): its command-line tests pin --broker
		// amqp://… as a usage error.
		p, err := openPublisher(dsn.Broker{Kind: dsn.NATS, URL: nurl}, "")
		if err != nil {
			return err
		}
		defer p.Close()
		pub = p
	}
	where := "database " + redact.URL(u)
	c, err := console.New(d, console.Config{
		Token: tok, ReadOnly: *readOnly, Publisher: pub, SecureCookie: *secure, Describe: where,
		Logger: slog.New(slog.NewTextHandler(env.Stderr, nil)),
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", *addr, err)
	}
	defer ln.Close()
	mux := http.NewServeMux()
	mux.Handle("/console/", c.Handler())
	mux.Handle("/console", c.Handler())
	mux.Handle("GET /{$}", http.RedirectHandler("/console/", http.StatusSeeOther))
	srv := httpserver.New("", mux)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go func() { _ = c.Run(sctx) }()

	// The start-up text in one write, so whoever watches the output for
	// the address reads the whole of it.
	var w strings.Builder
	fmt.Fprintf(&w, "idem console is running at http://%s/console/\n", ln.Addr())
	fmt.Fprintf(&w, "  %s\n", where)
	if nurl != "" {
		fmt.Fprintf(&w, "  redrives publish to NATS %s\n", redact.URL(nurl))
	} else {
		fmt.Fprintf(&w, "  no broker (--nats): redrive is disabled, discard and the rest work\n")
	}
	if *readOnly {
		fmt.Fprintf(&w, "  read-only: every action is refused\n")
	}
	switch tokenFrom {
	case "": // generated: the only place it is ever shown
		fmt.Fprintf(&w, "  token: %s (generated; pass --token or IDEM_CONSOLE_TOKEN to keep one)\n", tok)
	default:
		fmt.Fprintf(&w, "  token: from %s\n", tokenFrom)
	}
	fmt.Fprintf(&w, "Log in with your name and the token, or send 'Authorization: Bearer <token>'. Ctrl-C stops it.\n")
	_, _ = io.WriteString(env.Stdout, w.String())

	select {
	case <-ctx.Done():
	case err := <-served:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shut)
}

// consoleToken chooses the console's token: the flag's value (from names
// the flag), else $IDEM_CONSOLE_TOKEN, else a generated one (from "": the
// caller prints it, once).
func consoleToken(env *Env, flag, flagName string) (tok, from string, err error) {
	if flag != "" {
		return flag, flagName, nil
	}
	if tok := env.Getenv("IDEM_CONSOLE_TOKEN"); tok != "" {
		return tok, "IDEM_CONSOLE_TOKEN", nil
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", "", err
	}
	return hex.EncodeToString(b), "", nil
}

// demoConsole is the console "idem demo" mounts at /console/, on the demo's
// database, broker and metrics, with POST /demo/poison beside it.
type demoConsole struct {
	handler   http.Handler // the demo's API, the console and /demo/poison
	token     string
	tokenFrom string // "" when generated
	close     func() error
}

// newDemoConsole builds the demo's console; token "" falls back to
// IDEM_CONSOLE_TOKEN, then a generated one. Its sampler runs until ctx ends.
func newDemoConsole(ctx context.Context, env *Env, sys *boxoffice.System[any], token, where string) (*demoConsole, error) {
	dc := &demoConsole{}
	var err error
	if dc.token, dc.tokenFrom, err = consoleToken(env, token, "--console-token"); err != nil {
		return nil, err
	}
	pub, err := sys.Config().Broker.Publisher()
	if err != nil {
		return nil, err
	}
	c, err := console.New(sys.DB(), console.Config{Token: dc.token, Publisher: pub, Gatherer: sys.Registry(),
		Describe: "boxoffice demo, " + where})
	if err != nil {
		_ = pub.Close()
		return nil, err
	}
	sctx, stop := context.WithCancel(ctx)
	go func() { _ = c.Run(sctx) }()
	dc.close = func() error { stop(); return pub.Close() }
	mux := http.NewServeMux()
	mux.Handle("/", sys.Handler())
	mux.Handle("/console/", c.Handler())
	mux.Handle("/console", c.Handler())
	mux.Handle("POST /demo/poison", sys.PoisonHandler())
	dc.handler = mux
	return dc, nil
}

// printConsole writes the demo start-up text's console line.
func (dc *demoConsole) printConsole(w io.Writer, url string) {
	switch dc.tokenFrom {
	case "": // generated: the only place it is shown
		fmt.Fprintf(w, "  console:        %s/console/ (token %s, generated; pass --console-token or IDEM_CONSOLE_TOKEN to keep one)\n", url, dc.token)
	default:
		fmt.Fprintf(w, "  console:        %s/console/ (token from %s)\n", url, dc.tokenFrom)
	}
}

// printPoison writes the demo start-up text's POST /demo/poison hint.
func (dc *demoConsole) printPoison(w io.Writer, url string) {
	fmt.Fprintf(w, "  # publish one invalid OrderConfirmed: watch it land in the console's dead letters (%s/console/dlq),\n", url)
	fmt.Fprintf(w, "  # then redrive it, discard it, or edit \"seats\" to 1 and redrive it as a new revision\n")
	fmt.Fprintf(w, "  curl -i -X POST %s/demo/poison\n", url)
}
