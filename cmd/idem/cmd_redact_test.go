package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// natsWithPassword starts a JetStream server that requires user "idem"
// with password pass, and returns its client URL carrying them.
func natsWithPassword(t *testing.T, pass string) string {
	t.Helper()
	srv := natsServer(t, server.Options{JetStream: true, StoreDir: t.TempDir(), Username: "idem", Password: pass})
	return fmt.Sprintf("nats://idem:%s@%s", pass, srv.Addr().String())
}

// TestDemoStartupRedacts: the demo's start-up text shows the database and
// broker URLs without their passwords, and a webhook secret that was given
// (not generated) is not shown (item 9).
func TestDemoStartupRedacts(t *testing.T) {
	t.Parallel()
	natsURL := natsWithPassword(t, "natspass-hunter2")
	db := "sqlite://" + filepath.Join(t.TempDir(), "idem.db") + "?password=dbpass-hunter3&_x=1"
	_, text, stop := startDemoText(t, func(string) string { return "" }, "--data", t.TempDir(), "--db", db, "--nats", natsURL,
		"--webhook-secret", testSecret)
	for _, secret := range []string{"natspass-hunter2", "dbpass-hunter3", testSecret, strings.TrimPrefix(testSecret, "whsec_")} {
		if strings.Contains(text, secret) {
			t.Errorf("start-up text shows %q:\n%s", secret, text)
		}
	}
	for _, want := range []string{"nats://idem:xxxxx@", "password=xxxxx", "webhook secret: from --webhook-secret", `--secret "$IDEM_WEBHOOK_SECRET"`} {
		if !strings.Contains(text, want) {
			t.Errorf("start-up text lacks %q:\n%s", want, text)
		}
	}
	if err := stop(); err != nil {
		t.Logf("demo shutdown right after start: %v", err)
	}
}

// TestCommandsRedactURLs: every command that prints a database or broker
// URL (on success or in an error) prints it without credentials (item 9).
func TestCommandsRedactURLs(t *testing.T) {
	t.Parallel()
	const pass, qpass = "userpass-hunter2", "querypass-hunter3"
	down := "postgres://idem:" + pass + "@127.0.0.1:1/idem?sslmode=disable&password=" + qpass
	vars := map[string]string{"USER": "tester"}
	check := func(args []string, wantCode int, wantOut string) {
		t.Helper()
		code, out, stderr := runCmd(t, vars, args...)
		if code != wantCode || !strings.Contains(out+stderr, wantOut) {
			t.Errorf("%q: exit %d (want %d), output %q %q lacks %q", args, code, wantCode, out, stderr, wantOut)
		}
		for _, s := range []string{pass, qpass} {
			if strings.Contains(out+stderr, s) {
				t.Errorf("%q prints %q: %s %s", args, s, out, stderr)
			}
		}
	}
	// Errors: an unreachable server, and an unparseable URL.
	for _, db := range []string{down, "postgres://idem:" + pass + "@127.0.0.1:bad/idem?password=" + qpass} {
		for _, args := range [][]string{
			{"stats"}, {"migrate", "up"}, {"migrate", "status"}, {"keys", "show", "--operation", "POST /orders", "k"},
			{"dlq", "list"}, {"dlq", "show", "1"}, {"dlq", "discard", "1"}, {"gc", "--once"}, {"gc"},
		} {
			check(append(args, "--db", db), 1, "127.0.0.1")
		}
	}
	// dlq redrive to a broker that refuses the password.
	natsURL := natsWithPassword(t, "right-password")
	path := filepath.Join(t.TempDir(), "idem.db")
	vars["IDEM_DATABASE_URL"] = "sqlite://" + path
	check([]string{"migrate", "up"}, 0, "applied")
	wrong := strings.Replace(natsURL, "right-password", pass, 1)
	check([]string{"dlq", "redrive", "--all", "--nats", wrong}, 1, "xxxxx")

	// Success output: migrate and the gc loop name the database, redacted.
	if u := pgDatabase(t); u != "" {
		withPass := u + "&password=" + qpass
		check([]string{"migrate", "up", "--db", withPass}, 0, "password=xxxxx")
		check([]string{"migrate", "status", "--db", withPass}, 0, "password=xxxxx")
	}
}
