package outbox

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// fakePub is a broker.Publisher that records accepted messages in order and
// fails on command. It accepts messages in order and stops at the first
// failure, like a real adapter.
type fakePub struct {
	mu   sync.Mutex
	msgs []idem.Message
	down bool
	fail map[string]error // per message id
}

func (p *fakePub) Publish(ctx context.Context, msgs ...idem.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.down {
		return errors.New("fake broker: connection refused")
	}
	for _, m := range msgs {
		if m.ID == "" {
			return errors.New("fake broker: empty id")
		}
		if err := p.fail[m.ID]; err != nil {
			return err
		}
		p.msgs = append(p.msgs, m)
	}
	return nil
}

func (p *fakePub) Close() error { return nil }

func (p *fakePub) setDown(v bool) { p.mu.Lock(); p.down = v; p.mu.Unlock() }

func (p *fakePub) setFail(id string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail == nil {
		p.fail = map[string]error{}
	}
	if err == nil {
		delete(p.fail, id)
	} else {
		p.fail[id] = err
	}
}

func (p *fakePub) snapshot() []idem.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]idem.Message(nil), p.msgs...)
}

// distinct returns the number of distinct message ids accepted.
func (p *fakePub) distinct() int {
	seen := map[string]bool{}
	for _, m := range p.snapshot() {
		seen[m.ID] = true
	}
	return len(seen)
}

// serialPub wraps a publisher and counts overlapping Publish calls.
type serialPub struct {
	*fakePub
	mu       sync.Mutex
	inflight int
	overlap  int
}

func (s *serialPub) Publish(ctx context.Context, msgs ...idem.Message) error {
	s.mu.Lock()
	s.inflight++
	if s.inflight > 1 {
		s.overlap++
	}
	s.mu.Unlock()
	time.Sleep(time.Millisecond)
	err := s.fakePub.Publish(ctx, msgs...)
	s.mu.Lock()
	s.inflight--
	s.mu.Unlock()
	return err
}

// startRelay runs r until the returned stop function is called; stop
// returns Run's error.
func startRelay[TTx any](t testing.TB, r *Relay[TTx]) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitFor polls cond until it holds or 60s pass (a progress bound, not a
// timing assertion).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func fastRelay(name string) RelayConfig {
	return RelayConfig{
		Name:         name,
		BatchSize:    200,
		PollInterval: 20 * time.Millisecond,
		ClaimTTL:     2 * time.Second,
		BaseBackoff:  5 * time.Millisecond,
		MaxBackoff:   50 * time.Millisecond,
	}
}

func countState[TTx any](t testing.TB, d store.Driver[TTx], state string) int {
	return testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("outbox")+` WHERE state = $1`, state)
}

func ev(key string, n int) Event {
	return Event{Type: "test.event", Topic: "test." + key, Key: key, Payload: []byte(key + ":" + strconv.Itoa(n))}
}

func enqueueTx[TTx any](t testing.TB, d store.Driver[TTx], o *Outbox[TTx], evs ...Event) []Event {
	t.Helper()
	var out []Event
	err := store.InTx(context.Background(), d, func(tx TTx) error {
		var err error
		out, err = o.EnqueueTx(context.Background(), tx, evs...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkKeyOrder asserts that, per key, the first occurrences of the
// payloads "key:n" seen by the consumer are 0, 1, 2, … (duplicates of
// already-seen events are allowed) and returns the count per key.
func checkKeyOrder(t testing.TB, msgs []idem.Message) map[string]int {
	t.Helper()
	next := map[string]int{}
	for _, m := range msgs {
		key, ns, ok := strings.Cut(string(m.Payload), ":")
		if !ok {
			t.Fatalf("bad payload %q", m.Payload)
		}
		n, _ := strconv.Atoi(ns)
		switch want := next[key]; {
		case n == want:
			next[key] = n + 1
		case n > want:
			t.Fatalf("key %s: consumer saw event %d before event %d", key, n, want)
		}
	}
	return next
}

func mustEqual[T comparable](t testing.TB, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}
