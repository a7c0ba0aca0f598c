package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/jetstream"
	"github.com/idemkit/idem/console"
	"github.com/idemkit/idem/internal/httpserver"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/internal/sqlmeta"
)

// runConsole implements "idem console": the operator console (package
// console) on one database, served at http://ADDR/console/.
func runConsole(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "console", "[--db URL] [--nats URL] [--addr 127.0.0.1:8090] [--token T] [--read-only]")
	dbURL := fs.String("db", "", "database URL (postgres://… or sqlite://path); default $IDEM_DATABASE_URL or "+defaultDatabaseURL)
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
	if nurl != "" && !strings.HasPrefix(nurl, "nats://") && !strings.HasPrefix(nurl, "tls://") {
		return fmt.Errorf("%w: the broker URL must be nats://… or tls://… (NATS JetStream)", errUsage)
	}
	tok, tokenFrom := *token, "--token"
	if tok == "" {
		tok, tokenFrom = env.Getenv("IDEM_CONSOLE_TOKEN"), "IDEM_CONSOLE_TOKEN"
	}
	if tok == "" {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		tok, tokenFrom = hex.EncodeToString(b), ""
	}

	u := databaseURL(env, *dbURL)
	d, err := openSQL(ctx, u, mustExist)
	if err != nil {
		return err
	}
	defer d.Close()
	if ok, err := sqlmeta.Exists(ctx, d.Pool(), d.Dialect(), d.Names(), "audit_log"); err != nil {
		return hideURL(err, u)
	} else if !ok {
		return errors.New("the audit_log table does not exist: run 'idem migrate up' first (the console records every action there)")
	}
	var pub broker.Publisher
	if nurl != "" {
		nc, js, err := jetstream.Dial(nurl)
		if err != nil {
			return hideURL(err, nurl)
		}
		defer nc.Close()
		p, err := jetstream.NewPublisher(js, jetstream.PublisherConfig{})
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

	w := env.Stdout
	fmt.Fprintf(w, "idem console is running at http://%s/console/\n", ln.Addr())
	fmt.Fprintf(w, "  %s\n", where)
	if nurl != "" {
		fmt.Fprintf(w, "  redrives publish to NATS %s\n", redact.URL(nurl))
	} else {
		fmt.Fprintf(w, "  no broker (--nats): redrive is disabled, discard and the rest work\n")
	}
	if *readOnly {
		fmt.Fprintf(w, "  read-only: every action is refused\n")
	}
	switch tokenFrom {
	case "": // generated: the only place it is ever shown
		fmt.Fprintf(w, "  token: %s (generated; pass --token or IDEM_CONSOLE_TOKEN to keep one)\n", tok)
	default:
		fmt.Fprintf(w, "  token: from %s\n", tokenFrom)
	}
	fmt.Fprintf(w, "Log in with your name and the token, or send 'Authorization: Bearer <token>'. Ctrl-C stops it.\n")

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
