package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testdb"
)

// TestRun runs the quick start, as written, against a fresh PostgreSQL
// database: three deliveries of two events make two invoices, and a second
// run (a restarted consumer seeing every event again) makes none.
func TestRun(t *testing.T) {
	base := testdb.PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := freshDatabase(ctx, t, base)

	for round := 1; round <= 2; round++ {
		n, err := run(ctx, dbURL)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if n != 2 {
			t.Fatalf("round %d: %d invoices, want 2", round, n)
		}
	}
}

func freshDatabase(ctx context.Context, t *testing.T, base string) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "quickstart_" + hex.EncodeToString(b)
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("%s is set but PostgreSQL is unreachable: %v", testdb.EnvPostgres, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil { // name is generated above, never input
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("drop database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}
