package horizon_test

import (
	"testing"
	"time"

	"github.com/idemkit/idem/horizon"
)

const day = 24 * time.Hour

func TestChainAndWeakest(t *testing.T) {
	s := horizon.System{
		ClientRetry:    time.Hour,
		HTTPOperations: []horizon.HTTPOperation{{Name: "POST /orders", KeyRetention: day}},
		OutboxRetry:    10 * time.Minute,
		Streams:        []horizon.Stream{{Name: "ORDERS", MaxAge: 14 * day, DuplicateWindow: 2 * time.Minute}},
		Consumers:      []horizon.Consumer{{Name: "billing", Stream: "ORDERS", InboxRetention: 7 * day}},
		RedriveWindow:  3 * day,
		Effects:        []horizon.EffectKind{{Kind: "charge", RetrySpan: time.Hour}}, // key lifetime not declared
	}
	var stages []horizon.Stage
	for _, l := range s.Chain() {
		stages = append(stages, l.Stage)
	}
	want := []horizon.Stage{horizon.ClientRetry, horizon.HTTPKeyRetention, horizon.OutboxRetry, horizon.BrokerDedupWindow,
		horizon.BrokerMaxAge, horizon.InboxRetention, horizon.RedriveWindow, horizon.EffectRetry, horizon.ProviderKeyLifetime}
	if len(stages) != len(want) {
		t.Fatalf("chain %v, want %v", stages, want)
	}
	for i := range want {
		if stages[i] != want[i] {
			t.Fatalf("chain %v, want %v", stages, want)
		}
	}
	w, ok := s.Weakest()
	// Stream max age 14d against an inbox retention of 7d: -7d.
	if !ok || w.OK || w.Replay.Stage != horizon.BrokerMaxAge || w.Guard.Component != "billing" || w.Margin != -7*day || w.Severity != horizon.Breaks {
		t.Fatalf("weakest = %+v", w)
	}
	if u := s.Undeclared(); len(u) != 1 || u[0].Guard.Stage != horizon.ProviderKeyLifetime {
		t.Fatalf("undeclared = %+v", u)
	}
	// The outbox retry (10 min) outlives the 2 min dedup window: degrades.
	var dedup horizon.Check
	for _, c := range s.Checks() {
		if c.Guard.Stage == horizon.BrokerDedupWindow {
			dedup = c
		}
	}
	if dedup.OK || dedup.Severity != horizon.Degrades || dedup.Margin != -8*time.Minute {
		t.Fatalf("dedup check %+v", dedup)
	}
	// Unlimited replay horizons are longer than every finite record.
	s.RedriveWindow = horizon.Unlimited
	if w, _ := s.Weakest(); w.Replay.Stage != horizon.RedriveWindow || w.OK {
		t.Fatalf("weakest with an unlimited redrive window = %+v", w)
	}
	if !horizon.Covers(horizon.Unlimited, 100*day) || horizon.Covers(0, time.Second) || horizon.Covers(day, horizon.Unlimited) {
		t.Fatal("Covers")
	}
}

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		horizon.Unlimited: "unlimited", 0: "not declared", 2 * time.Minute: "2m", 7 * day: "7d",
		27*time.Hour + 35*time.Minute + 5*time.Second: "1d3h35m5s", 500 * time.Millisecond: "500ms",
	} {
		if got := horizon.Format(d); got != want {
			t.Errorf("Format(%v) = %q, want %q", d, got, want)
		}
	}
}
