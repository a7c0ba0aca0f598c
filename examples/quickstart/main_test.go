package main

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testdb"
)

// TestRun runs the quick start, as written, against a fresh PostgreSQL
// database: three deliveries of two events make two invoices, and a second
// run (a restarted consumer seeing every event again) makes none.
func TestRun(t *testing.T) {
	dbURL := testdb.PostgresDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

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
