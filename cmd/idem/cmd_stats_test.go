package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/store/sqlstore"
)

// A letter parked because its message had no id is named in idem stats with
// what the operator must configure.
func TestStatsNamesLettersWithoutID(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	vars := map[string]string{"IDEM_DATABASE_URL": "sqlite://" + filepath.Join(dir, "idem.db")}
	if code, _, stderr := runCmd(t, vars, "migrate", "up"); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	d, err := sqlstore.OpenSQLite(filepath.Join(dir, "idem.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	letters, err := dlq.New(d, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	msg := idem.Message{Subject: "order-events", Position: "7", Payload: []byte(`{}`), Attempt: 1}
	if _, err := letters.Park(context.Background(), dlq.FromMessage("search", msg, errors.New("no message id"))); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd(t, vars, "stats")
	if code != 0 {
		t.Fatalf("stats: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "no message id, consumer search (set consumer.Config.MessageID)") {
		t.Fatalf("stats does not name the id-less letter:\n%s", stdout)
	}
}
