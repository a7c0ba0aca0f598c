package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"golang.org/x/term"

	"github.com/idemkit/idem/cmd/idem/internal/bench"
	"github.com/idemkit/idem/store"
)

// runBench measures what idem's guarantees cost, as interleaved A/B pairs
// with medians and ratios (package bench). SQLite runs always; PostgreSQL
// runs when --db is a postgres:// URL, in a schema of its own that is
// dropped at the end.
func runBench(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "bench", "[--db URL] [--nats URL] [--duration 10s] [--json] [--peer watermill] [--pair REGEXP]")
	db := fs.String("db", "", "database URL: postgres://… adds the PostgreSQL variants; sqlite://path puts the SQLite file beside path (default IDEM_DATABASE_URL, else embedded SQLite)")
	natsURL := fs.String("nats", "", "NATS JetStream URL (default: an embedded in-process server; env IDEM_NATS_URL)")
	duration := fs.Duration("duration", 10*time.Second, "time budget of each pair, split over its interleaved rounds (A B A B A B)")
	asJSON := fs.Bool("json", false, `print {"results": [...]} as JSON instead of a table`)
	peer := fs.String("peer", "", "also compare with a peer library: watermill (needs a postgres:// --db and the Go toolchain; runs cmd/idem/internal/bench/peer)")
	pairRE := fs.String("pair", "", "run only the pairs whose name matches this regular expression (e.g. '^http_')")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	only, err := regexp.Compile(*pairRE)
	if err != nil {
		return fmt.Errorf("%w: --pair %q is not a regular expression: %v", errUsage, *pairRE, err)
	}
	if *duration < time.Second {
		return fmt.Errorf("%w: --duration %v is too short (at least 1s)", errUsage, *duration)
	}
	if *peer != "" && *peer != "watermill" {
		return fmt.Errorf("%w: --peer %q: the only peer is watermill", errUsage, *peer)
	}
	cfg := bench.Config{Peer: *peer, NATS: *natsURL}
	if cfg.NATS == "" {
		cfg.NATS = env.Getenv("IDEM_NATS_URL")
	}
	u := *db
	if u == "" {
		u = env.Getenv("IDEM_DATABASE_URL")
	}
	if u != "" {
		t, err := parseDatabaseURL(u)
		if err != nil {
			return err
		}
		if t.Dialect == store.Postgres {
			cfg.Postgres = t.Conn
		} else {
			cfg.SQLiteDir = filepath.Dir(t.Path)
		}
	}
	if cfg.Peer != "" && cfg.Postgres == "" {
		return fmt.Errorf("%w: --peer watermill needs --db postgres://… (watermill-sql runs on PostgreSQL)", errUsage)
	}

	e, err := bench.Open(ctx, cfg)
	if err != nil {
		return hideURL(hideURL(err, u), cfg.NATS)
	}
	defer e.Close()
	var pairs []bench.Pair
	for _, p := range e.Pairs() {
		if only.MatchString(p.Name) {
			pairs = append(pairs, p)
		}
	}
	if len(pairs) == 0 {
		return fmt.Errorf("%w: --pair %q matches no pair of this run", errUsage, *pairRE)
	}
	rep, runErr := bench.Run(ctx, pairs, bench.Options{
		Budget:    *duration,
		Progress:  progressPrinter(env),
		KeepGoing: true,
	})
	if cerr := e.Close(); cerr != nil {
		fmt.Fprintf(env.Stderr, "idem bench: cleanup: %v\n", cerr)
	}
	if *asJSON {
		if err := bench.WriteJSON(env.Stdout, rep); err != nil {
			return err
		}
	} else {
		if err := bench.WriteTable(env.Stdout, rep); err != nil {
			return err
		}
	}
	return runErr
}

// progressPrinter returns a Progress callback writing one status line to
// stderr: rewritten in place on a terminal, one line per step otherwise.
func progressPrinter(env *Env) func(bench.Progress) {
	tty := false
	if f, ok := env.Stderr.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	return func(p bench.Progress) {
		var line string
		switch {
		case p.Err != nil:
			line = fmt.Sprintf("[%d/%d] %s FAILED: %v", p.Index, p.Pairs, p.Pair, p.Err)
		case p.Setup:
			line = fmt.Sprintf("[%d/%d] %s: setting up", p.Index, p.Pairs, p.Pair)
		default:
			line = fmt.Sprintf("[%d/%d] %s: round %d/%d %s %.0f/s", p.Index, p.Pairs, p.Pair, p.Round, p.Rounds, p.Side, p.PerSecond)
		}
		line = fmt.Sprintf("bench %5.1fs %s", p.Elapsed.Seconds(), line)
		if tty && p.Err == nil {
			fmt.Fprintf(env.Stderr, "\r\033[K%s", line)
			if p.Index == p.Pairs && p.Round == p.Rounds && p.Side != "" && !p.Setup {
				// the table follows on stdout
				fmt.Fprintln(env.Stderr)
			}
			return
		}
		if tty {
			fmt.Fprint(env.Stderr, "\r\033[K")
		}
		fmt.Fprintln(env.Stderr, line)
	}
}
