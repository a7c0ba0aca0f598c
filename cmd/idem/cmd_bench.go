package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/idemkit/idem/cmd/idem/internal/bench"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql"
)

// runBench measures what idem's guarantees cost, as interleaved A/B pairs
// with medians and ratios (package bench). SQLite runs always; PostgreSQL
// runs when --db is a postgres:// URL, in a schema of its own that is
// dropped at the end; MySQL when it is a mysql:// URL, in a database of
// its own on that server, dropped at the end.
func runBench(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "bench", "[--db URL] [--nats URL] [--duration 10s] [--json] [--peer watermill,river] [--pair REGEXP] | --scale [--chart FILE.svg] | --soak 60s")
	db := fs.String("db", "", "database URL: postgres://… adds the PostgreSQL variants, mysql://… the MySQL ones (*_mysql); sqlite://path puts the SQLite file beside path (default IDEM_DATABASE_URL, else embedded SQLite)")
	natsURL := fs.String("nats", "", "NATS JetStream URL (default: an embedded in-process server; env IDEM_NATS_URL)")
	duration := fs.Duration("duration", 10*time.Second, "time budget of each pair, split over its interleaved rounds (A B A B A B)")
	asJSON := fs.Bool("json", false, `print {"results": [...]} as JSON instead of a table`)
	var peers peerList
	fs.Var(&peers, "peer", "also compare with peer libraries: a comma list of watermill and river, and the flag may repeat (--peer watermill,river or --peer watermill --peer river); needs a postgres:// --db and the Go toolchain (runs cmd/idem/internal/bench/peer)")
	retentionRows := fs.Int("retention-rows", 0, fmt.Sprintf("rows each side of retention_drop_vs_delete expires per round (PostgreSQL); 0: %d when --pair selects that pair, else the pair is left out (it takes minutes)", bench.DefaultRetentionRows))
	pairRE := fs.String("pair", "", "run only the pairs whose name matches this regular expression (e.g. '^http_')")
	scale := fs.Bool("scale", false, "instead of the pairs: run the inbox (Process, and BatchHandler of 100) and HTTP Idempotency-Key pairs against the plain baseline at 1, 2, 4, 8, 16 and 32 concurrent workers/clients on PostgreSQL (SQLite without a postgres:// --db); --duration is each pair's budget at each level")
	chart := fs.String("chart", "", "with --scale: also write the chart of the table as SVG to this file")
	soak := fs.Duration("soak", 0, "instead of the pairs: run the reference system (as idem demo) with 32 clients posting orders for this long on SQLite and, with a postgres:// --db, on PostgreSQL; report orders/s, 5xx, invoices, e-mails and how long after the last order every e-mail was sent (target ≤ 10s)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process (idem's side of every pair; go tool pprof reads it) to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("%w: --cpuprofile: %v", errUsage, err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	only, err := regexp.Compile(*pairRE)
	if err != nil {
		return fmt.Errorf("%w: --pair %q is not a regular expression: %v", errUsage, *pairRE, err)
	}
	if *scale && *soak > 0 {
		return fmt.Errorf("%w: --scale and --soak are separate runs", errUsage)
	}
	if *chart != "" && !*scale {
		return fmt.Errorf("%w: --chart needs --scale", errUsage)
	}
	if (*scale || *soak > 0) && (*pairRE != "" || len(peers) > 0) {
		return fmt.Errorf("%w: --pair and --peer select pairs; --scale and --soak run their own", errUsage)
	}
	if *soak < 0 || (*soak > 0 && *soak < time.Second) {
		return fmt.Errorf("%w: --soak %v is too short (at least 1s)", errUsage, *soak)
	}
	if *retentionRows < 0 {
		return fmt.Errorf("%w: --retention-rows must not be negative", errUsage)
	}
	if *retentionRows == 0 && *pairRE != "" && only.MatchString("retention_drop_vs_delete") {
		*retentionRows = bench.DefaultRetentionRows
	}
	if *duration < time.Second {
		return fmt.Errorf("%w: --duration %v is too short (at least 1s)", errUsage, *duration)
	}
	if env.CheckOnly {
		return nil
	}
	cfg := bench.Config{Peers: peers, NATS: *natsURL, RetentionRows: *retentionRows}
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
		switch t.Dialect {
		case store.Postgres:
			cfg.Postgres = t.Conn
		case idemmysql.Dialect:
			cfg.MySQL = t.Conn
		default:
			cfg.SQLiteDir = filepath.Dir(t.Path)
		}
	}
	if len(cfg.Peers) > 0 && cfg.Postgres == "" {
		return fmt.Errorf("%w: --peer %s needs --db postgres://… (the peers run on PostgreSQL)", errUsage, peers.String())
	}

	e, err := bench.Open(ctx, cfg)
	if err != nil {
		return hideURL(hideURL(err, u), cfg.NATS)
	}
	defer e.Close()
	switch {
	case *scale:
		return benchScale(ctx, env, e, *duration, *asJSON, *chart)
	case *soak > 0:
		return benchSoak(ctx, env, e, *soak, *asJSON)
	}
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

// benchScale is idem bench --scale: the scale table (or JSON) on stdout
// and, with chart, its SVG chart written to that file.
func benchScale(ctx context.Context, env *Env, e *bench.Env, budget time.Duration, asJSON bool, chart string) error {
	rep, runErr := e.RunScale(ctx, nil, bench.Options{Budget: budget, Progress: progressPrinter(env), KeepGoing: true})
	if cerr := e.Close(); cerr != nil {
		fmt.Fprintf(env.Stderr, "idem bench: cleanup: %v\n", cerr)
	}
	if chart != "" {
		var buf bytes.Buffer
		if err := bench.ScaleChart(rep).WriteSVG(&buf); err != nil {
			return err
		}
		if err := os.WriteFile(chart, buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	var err error
	if asJSON {
		err = bench.WriteScaleJSON(env.Stdout, rep)
	} else {
		err = bench.WriteScaleTable(env.Stdout, rep)
	}
	return errors.Join(err, runErr)
}

// benchSoak is idem bench --soak DURATION: the soak table (or JSON).
func benchSoak(ctx context.Context, env *Env, e *bench.Env, d time.Duration, asJSON bool) error {
	rep, runErr := e.RunSoak(ctx, bench.SoakOptions{Duration: d, Progress: func(s string) { fmt.Fprintln(env.Stderr, "bench "+s) }})
	if cerr := e.Close(); cerr != nil {
		fmt.Fprintf(env.Stderr, "idem bench: cleanup: %v\n", cerr)
	}
	var err error
	if asJSON {
		err = bench.WriteSoakJSON(env.Stdout, rep)
	} else {
		err = bench.WriteSoakTable(env.Stdout, rep)
	}
	if err == nil && runErr == nil {
		for _, r := range rep.Results {
			if !r.TargetMet {
				fmt.Fprintf(env.Stderr, "idem bench: soak on %s missed its target (every e-mail within %v of the last order, no 5xx)\n", r.Store, bench.SoakMaxDrain)
			}
		}
	}
	return errors.Join(err, runErr)
}

// peerList is the value of --peer: peer names, comma-separated, the flag
// repeatable; each name must be one of bench.KnownPeers, each kept once.
type peerList []string

func (p *peerList) String() string { return strings.Join(*p, ",") }

func (p *peerList) Set(v string) error {
	for name := range strings.SplitSeq(v, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(bench.KnownPeers(), name) {
			return fmt.Errorf("unknown peer %q (want a comma list of %s)", name, strings.Join(bench.KnownPeers(), ", "))
		}
		if !slices.Contains(*p, name) {
			*p = append(*p, name)
		}
	}
	return nil
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
