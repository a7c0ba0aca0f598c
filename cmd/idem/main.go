// Command idem runs idem's fault drill, reference system, migrations and
// operator tools. Run "idem help" for the list of commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
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
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

func commands() []command {
	return []command{
		{name: "drill", summary: "run the fault drill against the reference system and verify every invariant", run: runDrill},
		{name: "demo", summary: "start the reference system (boxoffice) as an HTTP server", run: runDemo},
		{name: "migrate", summary: "apply or show database migrations (up|status)", run: runMigrate},
		{name: "gc", summary: "delete expired records in bounded batches", run: runGC},
		{name: "dlq", summary: "list, show, redrive or discard dead letters", run: runDLQ},
		{name: "keys", summary: "show stored HTTP idempotency key records", run: runKeys},
		{name: "stats", summary: "print idem's counters for a database", run: runStats},
		{name: "bench", summary: "measure idem's cost as ratios against a plain baseline", run: runBench},
		{name: "version", summary: "print the version", run: runVersion},
		{name: "worker", summary: "run one component as a child process (used by drill --processes)", hidden: true, run: runWorker},
	}
}

// errUsage marks an error whose message is a usage problem (exit status 2).
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}, os.Args[1:])
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
			fmt.Fprintf(env.Stderr, "idem %s: %v\n", c.name, err)
			return 2
		case errors.Is(err, errFailed):
			return 1
		default:
			fmt.Fprintf(env.Stderr, "idem %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(env.Stderr, "idem: unknown command %q\n\n", args[0])
	usage(env.Stderr)
	return 2
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
	fmt.Fprintln(w, "Database: --db URL or IDEM_DATABASE_URL (postgres://… or sqlite://path);")
	fmt.Fprintln(w, "default sqlite://./idem-data/idem.db. Run 'idem <command> -h' for its flags.")
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(env *Env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("idem "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(env.Stderr, "Usage: idem %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, turning flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}
