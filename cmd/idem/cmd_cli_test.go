package main

import (
	"context"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testdb"
)

// oneLine fails t unless s is exactly one non-empty line.
func assertOneLine(t *testing.T, what, s string) {
	t.Helper()
	if s == "" || strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") {
		t.Errorf("%s: stderr is not one line: %q", what, s)
	}
}

// pgDatabase creates a fresh PostgreSQL database (dropped at the end of t)
// and returns its URL, or skips t when IDEM_TEST_POSTGRES_URL is unset.
// The commands use idem's default schema, so each test gets its own
// database instead of a schema.
func pgDatabase(t *testing.T) string {
	t.Helper()
	return testdb.PostgresDatabase(t)
}

// pgTables returns the tables of idem's schema in the database at u.
func pgTables(t *testing.T, u string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = 'idem' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestSplitFlags(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("db", "", "")
	fs.Bool("json", false, "")
	cases := []struct {
		args, flags, pos []string
	}{
		{[]string{"up", "--db", "X"}, []string{"--db", "X"}, []string{"up"}},
		{[]string{"--db", "X", "up"}, []string{"--db", "X"}, []string{"up"}},
		{[]string{"show", "--json", "1", "-db=X", "2"}, []string{"--json", "-db=X"}, []string{"show", "1", "2"}},
		{[]string{"show", "--", "--db", "-"}, nil, []string{"show", "--db", "-"}},
		{[]string{"--json=false", "-", "--bogus", "v"}, []string{"--json=false", "--bogus"}, []string{"-", "v"}},
		{[]string{"--db"}, []string{"--db"}, nil},
	}
	for _, c := range cases {
		flags, pos := splitFlags(fs, c.args)
		if !slices.Equal(flags, c.flags) || !slices.Equal(pos, c.pos) {
			t.Errorf("splitFlags(%q) = %q, %q; want %q, %q", c.args, flags, pos, c.flags, c.pos)
		}
	}
}

// TestMigrateFlagPositions: "migrate up --db X" and "migrate --db X up"
// both act on X (item 16: the flag after the action used to be ignored and
// the default ./idem-data/idem.db migrated instead).
func TestMigrateFlagPositions(t *testing.T) {
	t.Parallel()
	noEnv := map[string]string{}
	for _, order := range [][]string{{"migrate", "up", "--db", ""}, {"migrate", "--db", "", "up"}} {
		path := filepath.Join(t.TempDir(), "x.db")
		args := slices.Clone(order)
		args[slices.Index(args, "")] = "sqlite://" + path
		code, out, stderr := runCmd(t, noEnv, args...)
		if code != 0 || !strings.Contains(out, "applied 0001") || !strings.Contains(out, "database sqlite://"+path) {
			t.Fatalf("%q: exit %d: %s %s", args, code, out, stderr)
		}
		// The status of X, flag last, shows it migrated.
		code, out, stderr = runCmd(t, noEnv, "migrate", "status", "--db", "sqlite://"+path)
		if code != 0 || strings.Contains(out, "pending") || !strings.Contains(out, "applied") {
			t.Fatalf("status after %q: exit %d: %s %s", args, code, out, stderr)
		}
	}
	if _, err := os.Stat("idem-data"); err == nil {
		t.Fatal("a default ./idem-data appeared in the package directory")
	}
}

func TestMigrateFlagPositionsPostgres(t *testing.T) {
	t.Parallel()
	for _, after := range []bool{true, false} {
		u := pgDatabase(t)
		args := []string{"migrate", "--db", u, "up"}
		if after {
			args = []string{"migrate", "up", "--db", u}
		}
		code, out, stderr := runCmd(t, map[string]string{}, args...)
		if code != 0 || !strings.Contains(out, "applied 0001") {
			t.Fatalf("%q: exit %d: %s %s", args, code, out, stderr)
		}
		if tables := pgTables(t, u); !slices.Contains(tables, "idempotency_keys") {
			t.Fatalf("after %q the database has tables %q", args, tables)
		}
		code, out, stderr = runCmd(t, map[string]string{}, "migrate", "status", "--db", u)
		if code != 0 || strings.Contains(out, "pending") {
			t.Fatalf("status --db after the action: exit %d: %s %s", code, out, stderr)
		}
	}
}

// everyCommand lists a command line per command and action, used to check
// flag handling everywhere.
var everyCommand = [][]string{
	{"drill"}, {"demo"}, {"migrate", "up"}, {"migrate", "status"}, {"gc"}, {"dlq", "list"}, {"dlq", "show", "1"},
	{"dlq", "redrive", "1"}, {"dlq", "discard", "1"}, {"keys", "show", "k"}, {"stats"}, {"bench"}, {"version"},
	{"webhook", "sign"}, {"worker"}, {"audit", "list"}, {"console"},
}

// TestUnknownFlagAnywhere: an unknown flag before or after the action is a
// usage error (exit 2) on one line, and nothing runs.
func TestUnknownFlagAnywhere(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"IDEM_DATABASE_URL": "sqlite://" + filepath.Join(t.TempDir(), "none", "idem.db")}
	for _, line := range everyCommand {
		for _, args := range [][]string{
			append([]string{line[0], "--bogus"}, line[1:]...),
			append(slices.Clone(line), "--bogus"),
			append(slices.Clone(line), "--bogus=1"),
		} {
			code, _, stderr := runCmd(t, vars, args...)
			if code != 2 || !strings.Contains(stderr, "-bogus") {
				t.Errorf("%q: exit %d, stderr %q; want 2 naming the flag", args, code, stderr)
			}
			assertOneLine(t, strings.Join(args, " "), stderr)
		}
	}
	if _, err := os.Stat(strings.TrimPrefix(vars["IDEM_DATABASE_URL"], "sqlite://")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a command ran despite the bad flag")
	}
}

// TestHelpEveryCommand: "idem CMD -h" prints the command's usage on stdout
// and exits 0, before or after the action.
func TestHelpEveryCommand(t *testing.T) {
	t.Parallel()
	for _, line := range everyCommand {
		for _, h := range []string{"-h", "--help"} {
			args := append(slices.Clone(line), h)
			code, out, stderr := runCmd(t, map[string]string{}, args...)
			if code != 0 || !strings.Contains(out, "Usage: idem "+line[0]) || !strings.Contains(out, "Flags:") || stderr != "" {
				t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, stderr)
			}
		}
	}
}

// TestBadCommandLines: every bad command line exits 2 with one line on
// stderr.
func TestBadCommandLines(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"IDEM_DATABASE_URL": "sqlite://" + filepath.Join(t.TempDir(), "none", "idem.db")}
	for _, args := range [][]string{
		{"nope"},
		{"nope\x1b]0;x\x07"},
		{"migrate", "sideways"},
		{"migrate", "up", "status"},
		{"migrate", "--db"},
		{"migrate", "up", "--db", "oracle://root:hunter2@h/db"},
		{"migrate", "up", "--db", "sqlite://"},
		{"migrate", "up", "--db", "hunter2"},
		{"dlq"},
		{"dlq", "fly"},
		{"dlq", "show"},
		{"dlq", "show", "x"},
		{"dlq", "redrive"},
		{"dlq", "list", "--state", "odd"},
		{"dlq", "list", "--since", "yesterday"},
		{"keys"},
		{"keys", "list"},
		{"keys", "show"},
		{"keys", "show", "k"},
		{"stats", "extra"},
		{"gc", "extra"},
		{"gc", "--batch", "0"},
		{"gc", "--interval", "soon"},
		{"demo", "--webhook-secret", "nope"},
		{"demo", "extra"},
		{"demo", "--db", "oracle://root:hunter2@h/db"},
		{"webhook"},
		{"webhook", "verify"},
		{"webhook", "sign", "body"},
		{"webhook", "sign", "--data", "x"},
		{"webhook", "sign", "--secret", "hunter2", "--data", "x"},
		{"webhook", "sign", "--secret", testSecret, "--id", "a.b", "--data", "x"},
		{"webhook", "sign", "--secret", testSecret, "--data", "x", "--curl", "ftp://h/x"},
		{"webhook", "sign", "--secret", testSecret, "--data", "\x1b[2J", "--curl", "http://h/x"},
		{"webhook", "sign", "--secret", testSecret, "--timestamp", "-1", "--data", "x"},
		{"version", "extra"},
	} {
		code, out, stderr := runCmd(t, vars, args...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2: %s %s", args, code, out, stderr)
		}
		assertOneLine(t, strings.Join(args, " "), stderr)
		if strings.Contains(stderr, "hunter2") || strings.Contains(stderr, "\x1b") {
			t.Errorf("%q: stderr echoes the input: %q", args, stderr)
		}
	}
	if _, err := os.Stat(filepath.Dir(strings.TrimPrefix(vars["IDEM_DATABASE_URL"], "sqlite://"))); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a bad command line created the database directory")
	}
}

// TestUnknownSchemeNotEchoed: the usage error for an unsupported database
// URL names the scheme only (item 9).
func TestUnknownSchemeNotEchoed(t *testing.T) {
	t.Parallel()
	code, _, stderr := runCmd(t, map[string]string{}, "stats", "--db", "oracle://root:hunter2@db.internal:1521/shop")
	if code != 2 || !strings.Contains(stderr, `"oracle"`) || strings.Contains(stderr, "hunter2") || strings.Contains(stderr, "db.internal") {
		t.Fatalf("exit %d: %q", code, stderr)
	}
	assertOneLine(t, "stats --db oracle://…", stderr)
}

// TestReadOnlyCommandsCreateNothing: the read-only commands (and the
// maintenance ones, which need existing tables) on a mistyped SQLite path
// fail with one clear line and create neither the file nor its directory
// (item 19).
func TestReadOnlyCommandsCreateNothing(t *testing.T) {
	t.Parallel()
	for _, line := range [][]string{
		{"stats"}, {"stats", "--json"}, {"migrate", "status"}, {"keys", "show", "--operation", "POST /orders", "k"},
		{"dlq", "list"}, {"dlq", "show", "1"}, {"dlq", "discard", "1"}, {"gc", "--once"}, {"audit", "list"},
	} {
		for _, viaEnv := range []bool{false, true} {
			dir := filepath.Join(t.TempDir(), "typo")
			path := filepath.Join(dir, "idem.db")
			args, vars := slices.Clone(line), map[string]string{}
			if viaEnv {
				vars["IDEM_DATABASE_URL"] = "sqlite://" + path
			} else {
				args = append(args, "--db", "sqlite://"+path)
			}
			code, out, stderr := runCmd(t, vars, args...)
			if code != 1 || !strings.Contains(stderr, "no database at "+path) {
				t.Errorf("%q: exit %d, stderr %q, stdout %q; want 1 and \"no database at %s\"", args, code, stderr, out, path)
			}
			assertOneLine(t, strings.Join(args, " "), stderr)
			if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%q created %s", args, dir)
			}
			// An existing directory without the file: the file is not created.
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if code, _, _ := runCmd(t, vars, args...); code != 1 {
				t.Errorf("%q in an existing directory: exit %d", args, code)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("%q created %v", args, entries)
			}
		}
	}
}

// TestDBFlagEitherPosition: for every command that takes --db, the flag
// acts on its database whether it comes before or after the action and
// its arguments (the environment points at a missing database, so a flag
// that was ignored shows as "no database at").
func TestDBFlagEitherPosition(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.db")
	x := "sqlite://" + path
	if code, _, stderr := runCmd(t, map[string]string{}, "migrate", "up", "--db", x); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	vars := map[string]string{"IDEM_DATABASE_URL": "sqlite://" + filepath.Join(t.TempDir(), "missing.db"), "USER": "tester"}
	for _, c := range []struct {
		line []string
		code int
		want string
	}{
		{[]string{"migrate", "status"}, 0, "applied"},
		{[]string{"stats"}, 0, "inbox"},
		{[]string{"gc", "--once"}, 0, "deleted 0 row(s)"},
		{[]string{"dlq", "list"}, 0, "no dead letters"},
		{[]string{"dlq", "list", "--json"}, 0, "[]"},
		{[]string{"dlq", "show", "7"}, 1, ""},
		{[]string{"dlq", "discard", "7"}, 1, ""},
		{[]string{"keys", "show", "--operation", "POST /orders", "k"}, 1, "no record"},
	} {
		for _, args := range [][]string{
			append([]string{c.line[0], "--db", x}, c.line[1:]...),
			append(slices.Clone(c.line), "--db", x),
			append(slices.Clone(c.line), "--db="+x),
		} {
			code, out, stderr := runCmd(t, vars, args...)
			if code != c.code || strings.Contains(stderr, "no database") || !strings.Contains(out+stderr, c.want) {
				t.Errorf("%q: exit %d (want %d), stdout %q, stderr %q", args, code, c.code, out, stderr)
			}
		}
	}
}
