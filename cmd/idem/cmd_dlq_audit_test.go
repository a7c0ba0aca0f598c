package main

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/console"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/store/sqlstore"
)

// recordRetention records consumer's inbox retention in the database of
// vars, as the consumer does when it starts.
func recordRetention(t *testing.T, vars map[string]string, consumer string, retain time.Duration) {
	t.Helper()
	d, err := sqlstore.OpenSQLite(strings.TrimPrefix(vars["IDEM_DATABASE_URL"], "sqlite://"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ib, err := inbox.New(d, inbox.Config{RetentionFor: map[string]time.Duration{consumer: retain}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.RecordRetention(context.Background(), consumer); err != nil {
		t.Fatal(err)
	}
}

// --inbox-retention can shorten the retention a consumer recorded, never
// lengthen it: idem dlq redrive --inbox-retention 100000h does not redrive
// a 10-day-old letter. Past the recorded retention only --force --reason
// goes.
func TestDLQRetentionFlagCannotWiden(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"USER": "tester"}
	letters, srv, j := newDLQEnv(t, vars)
	ctx := context.Background()
	park := func(consumer, id string, age time.Duration) string {
		t.Helper()
		l := dlq.FromMessage(consumer, idem.Message{ID: id, Subject: "orders", Payload: []byte(`{}`), Attempt: 1}, idem.Permanent(errors.New("bad")))
		l.LastFailedAt = time.Now().Add(-age)
		n, err := letters.Park(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		return strconv.FormatInt(n, 10)
	}
	redrive := func(args ...string) (int, string, string) {
		return runCmd(t, vars, append([]string{"dlq", "redrive", "--nats", srv.ClientURL()}, args...)...)
	}
	published := func() uint64 {
		t.Helper()
		stream, err := j.Stream(ctx, "ORDERS")
		if err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	usage := func(what string, code int, stderr, want string) {
		t.Helper()
		if code != 2 || !strings.Contains(stderr, want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Fatalf("%s: exit %d %q, want status 2 and one line with %q", what, code, stderr, want)
		}
	}

	// billing recorded nothing: 7 days, and no longer claim is believed.
	old := park("billing", "old", 10*24*time.Hour)
	code, _, stderr := redrive(old, "--inbox-retention", "100000h")
	usage("redrive --inbox-retention 100000h", code, stderr, "recorded no inbox retention")
	code, _, stderr = redrive("--all", "--inbox-retention", "100000h")
	usage("redrive --all --inbox-retention 100000h", code, stderr, "recorded no inbox retention")

	// billing records 30 days: a 10-day-old letter is within them; a claim
	// past them is refused before anything is published.
	recordRetention(t, vars, "billing", 30*24*time.Hour)
	code, _, stderr = redrive(old, "--inbox-retention", "100000h")
	usage("redrive claiming more than billing's 30 days", code, stderr, "keeps message ids 30d")
	if n := published(); n != 0 {
		t.Fatalf("refused command lines published %d message(s)", n)
	}
	// A shorter claim is used: 10 days are past 9.
	if code, _, stderr = redrive(old, "--inbox-retention", "216h"); code != 1 || !strings.Contains(stderr, "redrive refused") {
		t.Fatalf("redrive with a 9-day claim: %d %s, want a refusal", code, stderr)
	}
	if code, out, stderr := redrive(old); code != 0 || !strings.Contains(out, "redriven 1") {
		t.Fatalf("redrive within billing's recorded 30 days: %d %s %s", code, out, stderr)
	}

	// shipping records 24 hours: a 2-day-old letter is past them (the
	// 7-day default does not apply); --force --reason redrives it.
	recordRetention(t, vars, "shipping", 24*time.Hour)
	ship := park("shipping", "ship", 48*time.Hour)
	if code, _, stderr = redrive(ship); code != 1 || !strings.Contains(stderr, "redrive refused") || !strings.Contains(stderr, "retention 1d") {
		t.Fatalf("redrive of a 2-day-old letter of a 24h consumer: %d %s, want a refusal", code, stderr)
	}
	if code, out, stderr := redrive(ship, "--force", "--reason", "checked: never shipped"); code != 0 || !strings.Contains(out, "redriven 1") {
		t.Fatalf("forced redrive: %d %s %s", code, out, stderr)
	}
	if l, _ := letters.Get(ctx, mustID(t, ship)); l.State != dlq.Redriven || l.RedriveReason != "checked: never shipped" {
		t.Fatalf("forced letter %+v", l)
	}
	if n := published(); n != 2 {
		t.Fatalf("%d message(s) published, want 2", n)
	}
}

func mustID(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// idem dlq redrive and discard, forced or not, leave the same audit-log
// entries as the console: actor, action, target, reason and outcome.
func TestDLQActionsAudited(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"USER": "tester"}
	letters, srv, _ := newDLQEnv(t, vars)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		l := dlq.FromMessage("billing", idem.Message{ID: id, Subject: "orders", Payload: []byte(`{}`), Attempt: 1}, idem.Permanent(errors.New("bad")))
		if id == "c" {
			l.LastFailedAt = time.Now().Add(-10 * 24 * time.Hour)
		}
		if _, err := letters.Park(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	nats := srv.ClientURL()
	for _, args := range [][]string{
		{"discard", "1", "--by", "bob", "--reason", "test order"},
		{"redrive", "2", "--nats", nats, "--reason", "bug fixed"},
		{"redrive", "3", "--nats", nats, "--force", "--reason", "checked: never applied", "--by", "carol"},
	} {
		if code, _, stderr := runCmd(t, vars, append([]string{"dlq"}, args...)...); code != 0 {
			t.Fatalf("dlq %v: %d %s", args, code, stderr)
		}
	}
	if code, _, _ := runCmd(t, vars, "dlq", "redrive", "2", "--nats", nats); code != 1 {
		t.Fatalf("second redrive: exit %d, want 1", code)
	}
	code, out, stderr := runCmd(t, vars, "audit", "list", "--json")
	if code != 0 {
		t.Fatalf("audit list: %d %s", code, stderr)
	}
	var es []console.AuditEntry
	if err := json.Unmarshal([]byte(out), &es); err != nil {
		t.Fatalf("audit list --json: %v\n%s", err, out)
	}
	type row struct{ actor, action, target, reason, outcome string }
	want := []row{ // newest first
		{"tester", "dlq.redrive", "letter 2", "", "failed"},
		{"carol", "dlq.redrive", "letter 3", "checked: never applied", "ok"},
		{"tester", "dlq.redrive", "letter 2", "bug fixed", "ok"},
		{"bob", "dlq.discard", "letter 1", "test order", "ok"},
	}
	if len(es) != len(want) {
		t.Fatalf("audit log has %d entries, want %d:\n%s", len(es), len(want), out)
	}
	for i, e := range es {
		got := row{e.Actor, e.Action, e.Target, e.Reason, e.Outcome}
		got.outcome, _, _ = strings.Cut(got.outcome, ":")
		if got != want[i] {
			t.Errorf("audit entry %d = %+v, want %+v", i, got, want[i])
		}
	}
	if !strings.Contains(es[1].Details, "forced") {
		t.Errorf("forced redrive's details %q do not say it was forced", es[1].Details)
	}
}
