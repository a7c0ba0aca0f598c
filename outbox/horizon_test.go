package outbox

import (
	"bytes"
	"database/sql"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testdb"
)

// The relay warns when its retry span outlives the broker's declared
// duplicate window, and not when the window covers it.
func TestRelayWarnsWhenRetrySpanOutlivesDuplicateWindow(t *testing.T) {
	t.Parallel()
	d := testdb.SQLite(t)
	relay := func(window time.Duration) (*Relay[*sql.Tx], string) {
		var buf bytes.Buffer
		r, err := NewRelay(d, &fakePub{}, RelayConfig{DuplicateWindow: window,
			MaxAttempts: 5, BaseBackoff: time.Second, MaxBackoff: 4 * time.Second, ClaimTTL: 30 * time.Second,
			Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return r, buf.String()
	}
	// 1s + 2s + 4s + 4s of backoff ceilings, plus one 30s claim.
	r, log := relay(2 * time.Minute)
	if span := r.RetrySpan(); span != 41*time.Second {
		t.Fatalf("RetrySpan = %v, want 41s", span)
	}
	if log != "" {
		t.Fatalf("warned although the window covers the span: %s", log)
	}
	_, log = relay(20 * time.Second)
	if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "duplicate window") || !strings.Contains(log, "retry_span=41s") {
		t.Fatalf("no warning for a 20s window: %q", log)
	}
	if _, log = relay(0); log != "" {
		t.Fatalf("warned without a declared window: %s", log)
	}
}
