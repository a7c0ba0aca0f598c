package drill_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem/cmd/idem/internal/drill"
)

func check(t *testing.T, rep drill.Report, want int) {
	t.Helper()
	var buf bytes.Buffer
	rep.WriteTable(&buf)
	t.Log("\n" + buf.String())
	checkWidth(t, buf.String())
	if len(rep.Scenarios) != want {
		t.Fatalf("%d scenarios ran, want %d", len(rep.Scenarios), want)
	}
	for _, s := range rep.Scenarios {
		if !s.Pass || s.Lost != 0 {
			t.Errorf("%s failed: expected %s, observed %s, lost %d: %s", s.Name, s.Expected, s.Observed, s.Lost, s.Error)
		}
	}
	if !rep.Pass {
		t.Fatal("drill failed")
	}
}

// TestDrillEmbedded runs every scenario, shortened, on the embedded
// default (SQLite + embedded JetStream) in-process.
func TestDrillEmbedded(t *testing.T) {
	rep, err := drill.Run(context.Background(), drill.Config{Orders: 120, Workers: 4, TempDir: t.TempDir(), Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	check(t, rep, len(drill.Names())-1)
	// A focused scenario says how many orders it placed, and why not --orders.
	var table bytes.Buffer
	rep.WriteTable(&table)
	for _, s := range rep.Scenarios {
		if s.Name == "webhook-replay" && s.Orders != 20 {
			t.Errorf("webhook-replay placed %d orders by its report, want 20 (a tenth of 120, at least 20)", s.Orders)
		}
	}
	if !strings.Contains(table.String(), "  orders:   20 (a focused scenario places a tenth of --orders") {
		t.Errorf("the report does not say why a focused scenario placed 20 orders:\n%s", table.String())
	}
	// The JSON shape is an interface.
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var v struct {
		Pass      *bool            `json:"pass"`
		Scenarios []map[string]any `json:"scenarios"`
	}
	if err := json.Unmarshal(buf.Bytes(), &v); err != nil || v.Pass == nil || len(v.Scenarios) != len(rep.Scenarios) {
		t.Fatalf("JSON %v: %s", err, buf.String())
	}
	for _, k := range []string{"name", "invariant", "expected", "observed", "duplicates_suppressed", "lost", "pass", "duration_ms"} {
		if _, ok := v.Scenarios[0][k]; !ok {
			t.Fatalf("JSON scenario lacks %q: %v", k, v.Scenarios[0])
		}
	}
}

func TestDrillUnknownScenario(t *testing.T) {
	if _, err := drill.Run(context.Background(), drill.Config{Scenarios: []string{"nope"}}); err == nil {
		t.Fatal("unknown scenario accepted")
	}
}

// buildIdem builds the idem command for the processes scenario.
func buildIdem(t *testing.T) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "idem")
	cmd := exec.Command("go", "build", "-o", exe, "github.com/idemkit/idem/cmd/idem")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return exe
}

// TestDrillProcesses runs the processes scenario: idem worker children on
// the parent's SQLite file and embedded JetStream, SIGKILLed and restarted
// at least 20 times.
func TestDrillProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the idem binary")
	}
	exe := buildIdem(t)
	tmp := t.TempDir()
	rep, err := drill.Run(context.Background(), drill.Config{Orders: 300, Workers: 4, Scenarios: []string{"processes"},
		Executable: exe, TempDir: tmp, Timeout: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	check(t, rep, 1)
	// The children's directory (logs, the shared SQLite file) is private.
	dir := filepath.Join(tmp, "processes")
	if fi, err := os.Stat(dir); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: mode %v, want 0700", dir, fi.Mode().Perm())
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) == 0 {
		t.Fatal("no child logs")
	}
	for _, l := range logs {
		if fi, err := os.Stat(l); err != nil {
			t.Error(err)
		} else if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", l, fi.Mode().Perm())
		}
	}
}

// checkWidth fails when a line of the human report is wider than
// drill.ReportWidth columns.
func checkWidth(t *testing.T, report string) {
	t.Helper()
	for i, line := range strings.Split(report, "\n") {
		if n := utf8.RuneCountInString(line); n > drill.ReportWidth {
			t.Errorf("report line %d is %d columns wide (limit %d): %q", i+1, n, drill.ReportWidth, line)
		}
	}
}

// TestReportFitsWidth: the human report keeps every line within 100
// columns whatever the scenarios' texts (issue 11, item 22: it was 364
// wide), and loses none of their words.
func TestReportFitsWidth(t *testing.T) {
	long := strings.Repeat("x", 150)
	res := drill.Result{
		Name:      "transient-permanent-dlq",
		Invariant: "transient → retried; poison → DLQ exactly; redrive once = one effect, and some more words to wrap over the limit",
		Expected:  "orders=invoices=emails=provider_unique=2000 dlq=55→15(poison) redriven=40 second_redrive_refused=40 kills>=20 replays_equal=all",
		Observed:  "orders=2000 invoices=2000 emails=2000 provider_unique=2000 kills=20 processes=6 replays=595 unequal=0 token=" + long,
		Error: "drill: not settled after 1m0s: orders=2000 invoices=2000 emails=2000 provider_unique=2000 lost=0 projection_off=5 parked=0\n" +
			"search projection off:\n  concert-0: inventory version=400 seats_left=999000; projection version=310 seats_left=999224; 400 events in the outbox, 90 newer than the projection\n" +
			"    message 01a230d9-a933-7a20-a019-5a9ef0c0eac8 version=312 outbox=published search_inbox=none dead_letter=none",
		Duration: 61234 * time.Millisecond,
	}
	rep := drill.Report{Pass: false, Scenarios: []drill.Result{res, {Name: "lost-response", Pass: true, Invariant: "short", Expected: "a", Observed: "a"}}}
	var buf bytes.Buffer
	rep.WriteTable(&buf)
	out := buf.String()
	t.Log("\n" + out)
	checkWidth(t, out)
	squeezed := strings.Join(strings.Fields(out), "")
	for _, text := range []string{res.Invariant, res.Expected, res.Observed, res.Error} {
		if !strings.Contains(squeezed, strings.Join(strings.Fields(text), "")) {
			t.Errorf("the report lost words of %q", text)
		}
	}
	for _, want := range []string{"SCENARIO", "transient-permanent-dlq", "FAIL", "1m1.234s", "FAIL: 1/2 scenarios kept their invariant."} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}

// TestDrillServers runs every scenario, shortened, on PostgreSQL and NATS
// when IDEM_TEST_POSTGRES_URL and IDEM_TEST_NATS_URL are set.
func TestDrillServers(t *testing.T) {
	pg, nats := os.Getenv("IDEM_TEST_POSTGRES_URL"), os.Getenv("IDEM_TEST_NATS_URL")
	if pg == "" && nats == "" {
		t.Skip("IDEM_TEST_POSTGRES_URL and IDEM_TEST_NATS_URL are not set: skipping the drill on real servers")
	}
	exe := ""
	if !testing.Short() {
		exe = buildIdem(t)
	}
	rep, err := drill.Run(context.Background(), drill.Config{Orders: 120, Workers: 4, DatabaseURL: pg, NATSURL: nats,
		Processes: exe != "", Executable: exe, TempDir: t.TempDir(), Timeout: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	want := len(drill.Names()) - 1
	if exe != "" {
		want++
	}
	check(t, rep, want)
}
