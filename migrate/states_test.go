package migrate_test

import (
	"context"
	"testing"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrate"
)

// TestLeaseStatesRewritten upgrades a schema at version 9 holding rows in
// the old state names and checks that 0010 rewrites every one of them to
// the shared vocabulary, keeps the rows, and that the new CHECK constraints
// refuse the old names.
func TestLeaseStatesRewritten(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		ctx := context.Background()
		d := e.D
		m := migrate.New(d)
		if _, err := m.UpTo(ctx, 9); err != nil {
			t.Fatal(err)
		}
		in, keys, ob := d.Table("inbox"), d.Table("idempotency_keys"), d.Table("outbox")
		testdb.Exec(t, d, `INSERT INTO `+in+` (consumer, message_id, fingerprint, state, received_at, expires_at) VALUES
			('c', 'a', $1, 'processing', 1, 9), ('c', 'b', $1, 'completed', 1, 9), ('c', 'f', $1, 'failed', 1, 9)`, []byte{1})
		testdb.Exec(t, d, `INSERT INTO `+keys+` (tenant, operation, idem_key, fingerprint, state, created_at, expires_at) VALUES
			('t', 'o', 'k1', $1, 'pending', 1, 9), ('t', 'o', 'k2', $1, 'completed', 1, 9)`, []byte{1})
		testdb.Exec(t, d, `INSERT INTO `+ob+` (source, event_id, type, subject, time, payload, state, created_at) VALUES
			('s', 'e1', 'x', 'x', 1, $1, 'pending', 1), ('s', 'e2', 'x', 'x', 1, $1, 'published', 1), ('s', 'e3', 'x', 'x', 1, $1, 'parked', 1)`, []byte{1})
		applied, err := m.Up(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(applied) == 0 || applied[0].Version != 10 {
			t.Fatalf("applied %v, want 0010 first", applied)
		}
		for _, c := range []struct {
			sql  string
			want int
		}{
			{`SELECT count(*) FROM ` + in + ` WHERE state = 'in_progress' AND message_id = 'a'`, 1},
			{`SELECT count(*) FROM ` + in + ` WHERE state IN ('completed', 'failed')`, 2},
			{`SELECT count(*) FROM ` + keys + ` WHERE state = 'in_progress' AND idem_key = 'k1'`, 1},
			{`SELECT count(*) FROM ` + keys + ` WHERE state = 'completed'`, 1},
			{`SELECT count(*) FROM ` + ob + ` WHERE state = 'completed' AND event_id = 'e2'`, 1},
			{`SELECT count(*) FROM ` + ob + ` WHERE state = 'failed' AND event_id = 'e3'`, 1},
			{`SELECT count(*) FROM ` + ob + ` WHERE state = 'pending' AND event_id = 'e1'`, 1},
		} {
			if got := testdb.Count(t, d, c.sql); got != c.want {
				t.Errorf("%s: %d, want %d", c.sql, got, c.want)
			}
		}
		for _, bad := range []string{
			`INSERT INTO ` + in + ` (consumer, message_id, fingerprint, state, received_at, expires_at) VALUES ('c', 'z', $1, 'processing', 1, 9)`,
			`INSERT INTO ` + keys + ` (tenant, operation, idem_key, fingerprint, state, created_at, expires_at) VALUES ('t', 'o', 'z', $1, 'pending', 1, 9)`,
			`INSERT INTO ` + ob + ` (source, event_id, type, subject, time, payload, state, created_at) VALUES ('s', 'z', 'x', 'x', 1, $1, 'published', 1)`,
		} {
			if _, err := d.Pool().Exec(ctx, bad, []byte{1}); err == nil {
				t.Errorf("old state accepted after 0010: %s", bad)
			}
		}
		// A new outbox event continues the sequence: no seq is reused.
		testdb.Exec(t, d, `INSERT INTO `+ob+` (source, event_id, type, subject, time, payload, state, created_at) VALUES ('s', 'e4', 'x', 'x', 1, $1, 'pending', 1)`, []byte{1})
		if got := testdb.Count(t, d, `SELECT count(*) FROM `+ob+` WHERE event_id = 'e4' AND seq > 3`); got != 1 {
			t.Errorf("the outbox sequence restarted after the rebuild")
		}
	}, testdb.Unmigrated)
}
