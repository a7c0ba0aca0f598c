package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemkit/idem/boxoffice"
)

// runWorker runs some of the boxoffice's background components (relay,
// consumers, effect worker) in this process, on a shared database and NATS
// server, until it is interrupted — or SIGKILLed by "idem drill
// --processes", which is what it is for.
func runWorker(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "worker", "--role relay|consumers|effects|notification|billing|search[,…] --db URL --nats URL --provider URL")
	roles := fs.String("role", "", "comma-separated roles: relay, consumers (= notification,billing,search), notification, billing, search, effects")
	db := fs.String("db", "", "database URL (postgres://… or sqlite://path); env IDEM_DATABASE_URL")
	schema := fs.String("schema", "", "PostgreSQL schema of idem's tables (default idem)")
	natsURL := fs.String("nats", "", "NATS server URL; env IDEM_NATS_URL")
	stream := fs.String("stream", "", "JetStream stream (default BOXOFFICE)")
	subject := fs.String("subject", "", "order subject (default order-events)")
	provider := fs.String("provider", "", "e-mail provider base URL (required with effects)")
	ackWait := fs.Duration("ack-wait", 0, "consumer ack wait (default 30s)")
	dupWindow := fs.Duration("duplicates", 0, "stream duplicate window (default 2m)")
	lease := fs.Duration("effect-lease", 0, "effect lease (default 10s)")
	claimTTL := fs.Duration("claim-ttl", 0, "relay claim lease (default 10s)")
	poll := fs.Duration("poll", 0, "relay and effect worker idle poll (default 100ms)")
	verbose := fs.Bool("v", false, "log to stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var rs []boxoffice.Role
	for _, r := range strings.Split(*roles, ",") {
		switch r = strings.TrimSpace(r); r {
		case "":
		case "consumers":
			rs = append(rs, boxoffice.RoleNotification, boxoffice.RoleBilling, boxoffice.RoleSearch)
		case "api":
			return fmt.Errorf("%w: the worker does not serve the API; use idem demo", errUsage)
		default:
			role, err := boxoffice.ParseRole(r)
			if err != nil {
				return fmt.Errorf("%w: %v", errUsage, err)
			}
			rs = append(rs, role)
		}
	}
	if len(rs) == 0 {
		return fmt.Errorf("%w: --role is required", errUsage)
	}
	url := databaseURL(env, *db)
	if *natsURL == "" {
		*natsURL = env.Getenv("IDEM_NATS_URL")
	}
	if *natsURL == "" {
		return fmt.Errorf("%w: --nats is required", errUsage)
	}
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	sys, err := boxoffice.Open(ctx, boxoffice.Options{
		DatabaseURL: url, Schema: *schema, NATSURL: *natsURL, Stream: *stream,
		AckWait: *ackWait, Duplicates: *dupWindow, SQLiteSynchronous: "NORMAL",
		Config: boxoffice.Config{
			Roles: rs, Subject: *subject, ProviderURL: *provider,
			EffectLease: *lease, RelayClaimTTL: *claimTTL, PollInterval: *poll,
			RetryBase: 20 * time.Millisecond, RetryMax: 300 * time.Millisecond,
			Logger: logger,
		},
	})
	if err != nil {
		return err
	}
	defer sys.Close()
	return sys.Run(ctx)
}
