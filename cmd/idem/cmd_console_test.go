package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/idem/console"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/internal/testlog"
	"github.com/idemkit/idem/store/sqlstore"
)

// startConsole runs "idem console" with args until the test ends and
// returns its base URL and its start-up text.
func startConsole(t *testing.T, vars map[string]string, args ...string) (base, out string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr testlog.Buffer
	env := &Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return vars[k] }}
	done := make(chan error, 1)
	go func() { done <- runConsole(ctx, env, append([]string{"--addr", "127.0.0.1:0"}, args...)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("idem console: %v", err)
		}
	})
	// The whole start-up text: up to its last line.
	re := regexp.MustCompile(`(?s)running at (http://[^ ]+)/console/\n.*Ctrl-C stops it\.\n`)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("idem console stopped: %v\n%s", err, stderr.String())
		default:
		}
		if m := re.FindStringSubmatch(stdout.String()); m != nil {
			return m[1], stdout.String()
		}
		if time.Now().After(deadline) {
			t.Fatalf("idem console did not start:\n%s\n%s", stdout.String(), stderr.String())
		}
	}
}

func TestConsoleCommand(t *testing.T) {
	t.Parallel()
	vars := map[string]string{}
	letters, srv, _ := newDLQEnv(t, vars)
	ctx := context.Background()
	var ids []int64
	for _, m := range []string{"a", "b"} {
		id, err := letters.Park(ctx, dlq.Letter{Consumer: "billing", Source: "orders", MessageID: m, Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}

	base, out := startConsole(t, vars, "--nats", srv.ClientURL())
	m := regexp.MustCompile(`token: ([0-9a-f]{48}) \(generated`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("start-up text does not show a generated token:\n%s", out)
	}
	tok := m[1]
	if strings.Contains(out, srv.ClientURL()) {
		t.Fatal("start-up text shows the broker URL with its password")
	}
	post := func(path, bearer string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(url.Values{"reason": {"cli test"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		req.Header.Set(console.HeaderOperator, "ops-bot")
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(fmt.Sprintf("/console/dlq/%d/redrive", ids[0]), ""); code != http.StatusUnauthorized {
		t.Fatalf("redrive without the token: %d, want 401", code)
	}
	if code := post(fmt.Sprintf("/console/dlq/%d/redrive", ids[0]), tok); code != http.StatusSeeOther {
		t.Fatalf("redrive: %d, want 303", code)
	}
	if l, _ := letters.Get(ctx, ids[0]); l.State != dlq.Redriven {
		t.Fatalf("letter is %s, want redriven", l.State)
	}
	if code := post(fmt.Sprintf("/console/dlq/%d/discard", ids[1]), tok); code != http.StatusSeeOther {
		t.Fatalf("discard: %d, want 303", code)
	}

	// idem audit list shows both actions, newest first.
	var stdout, stderr bytes.Buffer
	env := &Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return vars[k] }}
	if err := runAudit(ctx, env, []string{"list", "--json"}); err != nil {
		t.Fatal(err)
	}
	var es []console.AuditEntry
	if err := json.Unmarshal(stdout.Bytes(), &es); err != nil {
		t.Fatalf("audit --json: %v\n%s", err, stdout.String())
	}
	if len(es) != 2 || es[0].Action != "dlq.discard" || es[1].Action != "dlq.redrive" || es[1].Actor != "ops-bot" ||
		es[1].Reason != "cli test" || es[1].Outcome != "ok" {
		t.Fatalf("audit entries: %+v", es)
	}
	stdout.Reset()
	if err := runAudit(ctx, env, []string{"list", "--action", "dlq.redrive"}); err != nil {
		t.Fatal(err)
	}
	if text := stdout.String(); !strings.Contains(text, "ops-bot") || strings.Contains(text, "dlq.discard") {
		t.Fatalf("audit list --action dlq.redrive:\n%s", text)
	}
}

func TestConsoleCommandReadOnlyAndToken(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "idem.db")
	vars := map[string]string{"IDEM_DATABASE_URL": "sqlite://" + dbPath, "IDEM_CONSOLE_TOKEN": "from-the-env-0123456789"}
	if code, _, stderr := runCmd(t, vars, "migrate", "up"); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	base, out := startConsole(t, vars, "--read-only")
	if !strings.Contains(out, "token: from IDEM_CONSOLE_TOKEN") || strings.Contains(out, "from-the-env-0123456789") {
		t.Fatalf("start-up text:\n%s", out)
	}
	req, _ := http.NewRequest("POST", base+"/console/dlq/1/discard", nil)
	req.Header.Set("Authorization", "Bearer from-the-env-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("read-only POST: %d, want 403", resp.StatusCode)
	}
	req, _ = http.NewRequest("GET", base+"/console/", nil)
	req.Header.Set("Authorization", "Bearer from-the-env-0123456789")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("read-only GET: %d, want 200", resp.StatusCode)
	}
}

func TestConsoleCommandNeedsTheAuditTable(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "idem.db")
	d, err := sqlstore.OpenSQLite(dbPath, sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	var stdout, stderr bytes.Buffer
	env := &Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	err = runConsole(context.Background(), env, []string{"--db", "sqlite://" + dbPath, "--addr", "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "idem migrate up") {
		t.Fatalf("console on an unmigrated database: %v", err)
	}
	for _, args := range [][]string{{"--broker", "amqp://x"}, {"extra"}, {"--nats", "nats://a", "--broker", "nats://b"}} {
		if err := runConsole(context.Background(), env, args); err == nil || !strings.Contains(err.Error(), "usage") && !strings.Contains(err.Error(), "nats") {
			t.Errorf("idem console %v: %v, want a usage error", args, err)
		}
	}
}

func TestAuditAndConsoleBadCommandLines(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"IDEM_DATABASE_URL": "sqlite://" + filepath.Join(t.TempDir(), "none", "idem.db")}
	for _, args := range [][]string{
		{"audit"}, {"audit", "fly"}, {"audit", "list", "x"}, {"audit", "list", "--since", "yesterday"},
		{"audit", "list", "--limit", "-1"}, {"console", "extra"}, {"console", "--broker", "amqp://u:hunter2@h"},
	} {
		code, out, stderr := runCmd(t, vars, args...)
		if code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || strings.Contains(stderr, "hunter2") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and one line", args, code, out, stderr)
		}
	}
	for _, line := range [][]string{{"audit", "list"}, {"console"}} {
		code, out, stderr := runCmd(t, vars, line...)
		if code != 1 || !strings.Contains(stderr, "no database at") {
			t.Errorf("%q on a missing database: exit %d, %q %q", line, code, out, stderr)
		}
	}
	for _, line := range [][]string{{"audit", "-h"}, {"console", "--help"}} {
		code, out, _ := runCmd(t, vars, line...)
		if code != 0 || !strings.Contains(out, "Usage: idem "+line[0]) {
			t.Errorf("%q: exit %d, %q", line, code, out)
		}
	}
}

// TestDemoMountsConsoleAndPoison: "idem demo" serves the console at
// /console/ behind its token, POST /demo/poison lands one letter per
// consumer in the dead letters, and the start-up text says so.
func TestDemoMountsConsoleAndPoison(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout testlog.Buffer
	env := &Env{Stdout: &stdout, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	done := make(chan error, 1)
	go func() {
		done <- runDemo(ctx, env, []string{"--addr", "127.0.0.1:0", "--data", t.TempDir(), "--webhook-secret", testSecret})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("demo: %v", err)
		}
	}()
	var out string
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out, "Press Ctrl-C"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("demo did not start:\n%s", out)
		}
		out = stdout.String()
	}
	m := regexp.MustCompile(`console: +(http://[^ ]+)/console/ \(token ([0-9a-f]{48}), generated`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "curl -i -X POST "+m[1]+"/demo/poison") {
		t.Fatalf("start-up text lacks the console URL, its token or the poison hint:\n%s", out)
	}
	base, tok := m[1], m[2]
	get := func(path, bearer string) (int, string) {
		req, _ := http.NewRequest("GET", base+path, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/console/dlq", ""); code != http.StatusSeeOther {
		t.Fatalf("console without the token: %d, want 303 to the login page", code)
	}
	resp, err := http.Post(base+"/demo/poison", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /demo/poison: %d", resp.StatusCode)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, body := get("/console/dlq", tok)
		if code != http.StatusOK {
			t.Fatalf("GET /console/dlq: %d", code)
		}
		if strings.Count(body, `data-testid="dlq-row"`) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the poison message did not reach the dead letters:\n%s", body)
		}
	}
	if code, body := get("/console/", tok); code != http.StatusOK || !strings.Contains(body, `data-testid="dlq-count">3<`) {
		t.Fatalf("overview: %d", code)
	}
}
