// Command idem runs idem's fault drill, reference system, migrations and
// operator tools. Run "idem help" for the list of commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// command is one subcommand. run receives the arguments after the
// subcommand's name.
type command struct {
	name    string
	summary string
	hidden  bool
	run     func(ctx context.Context, env *Env, args []string) error
}

// Env is what a command may touch of the outside world, so tests can run
// commands in-process.
type Env struct {
	// Stdin is read by commands that take data from standard input
	// ("idem webhook sign" without --data); nil reads as empty.
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
	// CheckOnly makes a command stop, with no error, once its command line
	// is parsed and validated, before it opens, reaches or starts anything
	// (the README test checks every documented command line with it).
	CheckOnly bool
}

func commands() []command {
	return []command{
		{name: "drill", summary: "run the fault drill against the reference system and verify every invariant", run: runDrill},
		{name: "demo", summary: "start the reference system (boxoffice) as an HTTP server", run: runDemo},
		{name: "migrate", summary: "apply or show database migrations (up|status)", run: runMigrate},
		{name: "gc", summary: "delete expired records in bounded batches", run: runGC},
		{name: "dlq", summary: "list, show, redrive or discard dead letters", run: runDLQ},
		{name: "keys", summary: "show stored HTTP idempotency key records", run: runKeys},
		{name: "proxy", summary: "put the Idempotency-Key contract in front of any HTTP service (reverse proxy)", run: runProxy},
		{name: "conform", summary: "probe any HTTP server for the Idempotency-Key contract (PASS/FAIL/SKIP table)", run: runConform},
		{name: "console", summary: "serve the operator console (dead letters, held work, keys, outbox, audit) in a browser", run: runConsole},
		{name: "audit", summary: "list the operator actions the console recorded", run: runAudit},
		{name: "saga", summary: "list sagas or show one with its steps, compensations and effects (list|show)", run: runSaga},
		{name: "stats", summary: "print idem's counters for a database", run: runStats},
		{name: "horizon", summary: "print the reference system's replay horizons, their checks and the weakest link", run: runHorizon},
		{name: "webhook", summary: "sign a webhook body (Standard Webhooks headers or a ready curl command)", run: runWebhook},
		{name: "bench", summary: "measure idem's cost as ratios against a plain baseline", run: runBench},
		{name: "version", summary: "print the version", run: runVersion},
		{name: "worker", summary: "run one component as a child process (used by drill --processes)", hidden: true, run: runWorker},
	}
}

// errUsage marks an error whose message is a usage problem (exit status 2).
var errUsage = errors.New("usage")

func main() {
	// idem's components log to slog.Default() unless given a logger; the
	// command shows their warnings and errors, not their routine lines.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}, os.Args[1:])
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit status.
func run(ctx context.Context, env *Env, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(env.Stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, env, args[1:])
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(env.Stderr, "idem %s: %s\n", c.name, oneLine(err))
			return 2
		case errors.Is(err, errFailed):
			return 1
		default:
			fmt.Fprintf(env.Stderr, "idem %s: %s\n", c.name, oneLine(err))
			return 1
		}
	}
	fmt.Fprintf(env.Stderr, "idem: unknown command %s (run 'idem help' for the list)\n", termSafe(fmt.Sprintf("%q", args[0])))
	return 2
}

// oneLine renders err as one terminal-safe line (joined errors separated
// by "; ").
func oneLine(err error) string {
	return termSafe(strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; "))
}

// errFailed reports a command that already printed why it failed (a drill
// with a failing scenario); main exits 1 without printing more.
var errFailed = errors.New("failed")

func usage(w io.Writer) {
	fmt.Fprintln(w, "idem makes side effects happen once in systems that deliver twice.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: idem <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		if !c.hidden {
			fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Database: --db URL or IDEM_DATABASE_URL (postgres://…, mysql://… or sqlite://path);")
	fmt.Fprintln(w, "default sqlite://./idem-data/idem.db. Run 'idem <command> -h' for its flags.")
}

// newFlags returns a flag set that reports errors instead of exiting. Its
// Usage (printed for -h) goes to standard output; errors are returned by
// [parseFlags] as one line.
func newFlags(env *Env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("idem "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stdout)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: idem %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args with flags allowed before, between and after the
// positional arguments ("migrate up --db X" and "migrate --db X up" are the
// same command line); everything after a "--" is positional. Afterwards
// fs.Args() holds the positional arguments in order. A flag error is a
// usage error whose message is one line; -h and --help print the usage and
// return flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string) error {
	flags, pos := splitFlags(fs, args)
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(flags)
	fs.Usage = usage
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return err
		}
		return fmt.Errorf("%w: %s (run '%s -h' for the flags)", errUsage, err, fs.Name())
	}
	if len(fs.Args()) != 0 { // cannot happen: every flag token was matched
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	// Parse with a leading "--" only records the positionals as fs.Args().
	return fs.Parse(append([]string{"--"}, pos...))
}

// splitFlags separates args into flag tokens (each flag with its value, in
// order) and positional arguments, knowing from fs which flags take a value.
// An unknown flag is kept among the flags for fs.Parse to report.
func splitFlags(fs *flag.FlagSet, args []string) (flags, pos []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return flags, append(pos, args[i+1:]...)
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a) // includes "-" (stdin by convention)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return flags, pos
}
