package drill_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem/drill"
)

func check(t *testing.T, rep drill.Report, want int) {
	t.Helper()
	var buf bytes.Buffer
	rep.WriteTable(&buf)
	t.Log("\n" + buf.String())
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
	rep, err := drill.Run(context.Background(), drill.Config{Orders: 300, Workers: 4, Scenarios: []string{"processes"},
		Executable: exe, TempDir: t.TempDir(), Timeout: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	check(t, rep, 1)
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
