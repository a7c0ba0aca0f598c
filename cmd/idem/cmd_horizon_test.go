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
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/horizon"
)

func TestHorizonCommand(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCmd(t, nil, "horizon")
	if code != 0 {
		t.Fatalf("horizon: %d %s", code, stderr)
	}
	for _, want := range []string{"client_retry", "http_key_retention", "POST /orders", "outbox_retry", "broker_dedup_window",
		"broker_max_age", "inbox_retention", "billing", "redrive_window", "provider_key_lifetime", "weakest link:"} {
		if !strings.Contains(out, want) {
			t.Errorf("horizon output lacks %q:\n%s", want, out)
		}
	}
	code, out, stderr = runCmd(t, nil, "horizon", "--json", "--client-retry", "1h", "--redrive-window", "72h")
	if code != 0 {
		t.Fatalf("horizon --json: %d %s", code, stderr)
	}
	var got struct {
		System  horizon.System  `json:"system"`
		Chain   []horizon.Link  `json:"chain"`
		Checks  []horizon.Check `json:"checks"`
		Weakest *horizon.Check  `json:"weakest"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("horizon --json: %v\n%s", err, out)
	}
	if got.System.ClientRetry != time.Hour || got.System.RedriveWindow != 72*time.Hour || len(got.Chain) == 0 || got.Weakest == nil {
		t.Fatalf("horizon --json: %+v", got)
	}
	if got.Chain[0].Stage != horizon.ClientRetry || got.Chain[len(got.Chain)-1].Stage != horizon.ProviderKeyLifetime {
		t.Fatalf("chain order: %+v", got.Chain)
	}
	if code, _, _ = runCmd(t, nil, "horizon", "extra"); code != 2 {
		t.Fatalf("horizon extra: exit %d, want 2", code)
	}
}

// idem dlq redrive refuses a letter older than the inbox retention, says
// why, and redrives it with --force and a reason.
func TestDLQRedriveForce(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"USER": "tester"}
	letters, srv, _ := newDLQEnv(t, vars)
	ctx := context.Background()
	l := dlq.FromMessage("billing", idem.Message{ID: "old", Subject: "orders", Payload: []byte(`{}`), Attempt: 1}, idem.Permanent(errors.New("bad")))
	l.LastFailedAt = time.Now().Add(-10 * 24 * time.Hour)
	id, err := letters.Park(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	sid := strconv.FormatInt(id, 10)
	nats := srv.ClientURL()
	code, _, stderr := runCmd(t, vars, "dlq", "redrive", sid, "--nats", nats)
	if code != 1 || !strings.Contains(stderr, "redrive refused") || !strings.Contains(stderr, "inbox retention") || !strings.Contains(stderr, "--force") {
		t.Fatalf("redrive of a 10-day-old letter: %d %s", code, stderr)
	}
	t.Logf("refusal: %s", stderr)
	if code, _, stderr = runCmd(t, vars, "dlq", "redrive", sid, "--nats", nats, "--force"); code != 2 || !strings.Contains(stderr, "--reason") {
		t.Fatalf("--force without --reason: %d %s", code, stderr)
	}
	// A longer retention on the command line is not believed: billing
	// recorded none, so the 7-day default stands (see
	// TestDLQRetentionFlagCannotWiden).
	if code, _, stderr = runCmd(t, vars, "dlq", "redrive", sid, "--nats", nats, "--inbox-retention", "720h"); code != 2 || !strings.Contains(stderr, "recorded no inbox retention") {
		t.Fatalf("redrive claiming a 30-day retention: %d %s, want a usage error", code, stderr)
	}
	l.MessageID = "old-2"
	id2, err := letters.Park(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCmd(t, vars, "dlq", "redrive", strconv.FormatInt(id2, 10), "--nats", nats, "--force", "--reason", "never applied: checked the ledger")
	if code != 0 || !strings.Contains(out, "redriven 1") {
		t.Fatalf("redrive --force --reason: %d %s %s", code, out, stderr)
	}
	if got, _ := letters.Get(ctx, id2); got.State != dlq.Redriven || got.RedriveReason != "never applied: checked the ledger" {
		t.Fatalf("forced letter %+v", got)
	}
}
