package main

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/idemkit/idem/cmd/idem/internal/drill"
)

// drillCmd runs "idem drill args…" in-process and returns its exit status,
// stdout and stderr.
func drillCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := run(ctx, &Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}, append([]string{"drill"}, args...))
	return code, stdout.String(), stderr.String()
}

// natsServer starts a NATS server on a random loopback port with opts
// (Host and Port are set here) and returns it.
func natsServer(t *testing.T, opts server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, true
	srv, err := server.NewServer(&opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	return srv
}

// TestDrillBadTargets: a --db or --nats the drill cannot use is a
// configuration error — exit 2, one line on stderr naming the target
// without its credentials, nothing on stdout (no banner, no table) — not a
// failed scenario (issue 11, item 20).
func TestDrillBadTargets(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-drill-secret"
	type tc struct {
		name string
		args []string
		want string // in the error line
	}
	cases := []tc{
		{"postgres unreachable", []string{"--db", "postgres://nobody:" + secret + "@127.0.0.1:1/x"}, "postgres://nobody:xxxxx@127.0.0.1:1/x"},
		{"postgres password in query", []string{"--db", "postgres://nobody@127.0.0.1:1/x?password=" + secret}, "password=xxxxx"},
		{"postgres unparseable", []string{"--db", "postgres://nobody:" + secret + "@127.0.0.1:bad/x"}, "not a valid PostgreSQL URL"},
		{"oracle", []string{"--db", "oracle://root:" + secret + "@127.0.0.1/x"}, "--db must be a postgres:// or mysql:// URL"},
		{"nats unreachable", []string{"--nats", "nats://user:" + secret + "@127.0.0.1:1"}, "nats://user:xxxxx@127.0.0.1:1"},
		{"nats token", []string{"--nats", "nats://" + secret + "@127.0.0.1:1"}, "nats://xxxxx@127.0.0.1:1"},
		{"nats without JetStream", []string{"--nats", natsServer(t, server.Options{}).ClientURL()}, "JetStream is not available"},
		{"unknown scenario", []string{"--scenario", "nope"}, `unknown scenario "nope"`},
	}
	if pg := os.Getenv("IDEM_TEST_POSTGRES_URL"); pg != "" {
		u, err := url.Parse(pg)
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/idem_drill_no_such_database"
		cases = append(cases, tc{"postgres database missing", []string{"--db", u.String()}, "idem_drill_no_such_database"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := drillCmd(t, append(c.args, "--orders", "20")...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing (no banner, no table)", stdout)
			}
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "idem drill: ") || !strings.Contains(lines[0], c.want) {
				t.Errorf("stderr %q: want one line \"idem drill: …%s…\"", stderr, c.want)
			}
			if strings.Contains(stdout+stderr, secret) {
				t.Errorf("the output shows the secret: %q %q", stdout, stderr)
			}
			if strings.Contains(stderr, "scenarios kept") || strings.Contains(stderr, "usage: usage") {
				t.Errorf("stderr %q reads like a drill run", stderr)
			}
		})
	}
}

// TestDrillReportWidth: the human output of a drill run (banner, table,
// details, verdict) has no line wider than 100 columns (item 22), and the
// banner names the broker without its password (item 20).
func TestDrillReportWidth(t *testing.T) {
	t.Parallel()
	const pass = "hunter3-drill-broker"
	srv := natsServer(t, server.Options{JetStream: true, StoreDir: t.TempDir(), Username: "idem", Password: pass})
	natsURL := "nats://idem:" + pass + "@" + srv.Addr().String()
	code, stdout, stderr := drillCmd(t, "--scenario", "key-reuse", "--orders", "20", "--workers", "2", "--nats", natsURL)
	if code != 0 || !strings.Contains(stdout, "PASS: 1/1 scenarios kept their invariant.") {
		t.Fatalf("exit %d:\n%s\n%s", code, stdout, stderr)
	}
	for i, line := range strings.Split(stdout, "\n") {
		if n := utf8.RuneCountInString(line); n > drill.ReportWidth {
			t.Errorf("line %d is %d columns wide (limit %d): %q", i+1, n, drill.ReportWidth, line)
		}
	}
	if strings.Contains(stdout+stderr, pass) {
		t.Errorf("the output shows the broker password:\n%s\n%s", stdout, stderr)
	}
	if !strings.Contains(stdout, "broker:   nats://idem:xxxxx@") {
		t.Errorf("the banner does not name the broker redacted:\n%s", stdout)
	}
}
