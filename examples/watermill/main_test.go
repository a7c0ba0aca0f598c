package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestRun runs the example twice on one SQLite file: the first run makes
// one invoice and one e-mail per order out of four deliveries (one of them
// failing after its write), and the second, a restarted service seeing
// every delivery again, makes none.
func TestRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "example.db")
	for round := 1; round <= 2; round++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var out bytes.Buffer
		res, err := run(ctx, path, &out)
		cancel()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if res.Invoices != 2 || res.Emails != 2 {
			t.Fatalf("round %d: %d invoices, %d e-mails, want 2 and 2", round, res.Invoices, res.Emails)
		}
		if want := "4 deliveries of 2 orders: 2 invoices, 2 e-mails\n"; out.String() != want {
			t.Errorf("round %d printed %q, want %q", round, out.String(), want)
		}
	}
}
