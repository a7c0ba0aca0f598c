package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRun runs the example on a fresh SQLite file: the retry replays the
// first response (one order), the same key with another item is refused.
func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run(t.Context(), filepath.Join(t.TempDir(), "orders.db"), &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	want := regexp.MustCompile(`^attempt 1: order (ord-\d+), replayed false
attempt 2: order (ord-\d+), replayed true
same key, another item: FailedPrecondition \(IDEMPOTENCY_KEY_REUSED\)
orders with key order-\d+: 1
$`)
	m := want.FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("output:\n%s", got)
	}
	if m[1] != m[2] {
		t.Fatalf("the replay named order %s, the first call %s", m[2], m[1])
	}
}
