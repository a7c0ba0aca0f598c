package retrytopic_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/retrytopic"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/origin"
	"github.com/idemkit/idem/store"
)

// Records of the dead-letter topic are parked in the dead-letter store by
// the consumer Consumers includes: one letter per message, with the
// original topic and position, the attempts, the recorded error and the
// headers; a duplicate record on the dead-letter topic parks once; a
// redrive republishes to the main topic, where the main consumer processes
// it once through its inbox.
func TestDeadLettersParkedAndRedriven(t *testing.T) {
	t.Parallel()
	eachDriverAndBroker(t, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}, testDeadLetters)
}

func testDeadLetters(t *testing.T, d store.Driver[any], rg *rig, r *retrytopic.Retrier) {
	bizTable(t, d)
	ctx := context.Background()
	j := &journal{}
	var broken atomic.Bool // "repairable" fails permanently until the fix is deployed
	broken.Store(true)
	h := handler(d, j, map[string]int{"always": -1})
	cs := setupHandler(t, d, rg, r, j, func(ctx context.Context, tx any, msg idem.Message) error {
		if msg.ID == "repairable" && broken.Load() {
			j.add(event{id: msg.ID, topic: msg.Subject, attempt: msg.Attempt})
			return idem.Permanent(errors.New("repairable: schema v2 not supported yet"))
		}
		return h(ctx, tx, msg)
	})
	if n := len(cs); n != 1+len(r.RetryTopics())+1 {
		t.Fatalf("%d consumers, want main + %d retry + dead-letter", n, len(r.RetryTopics()))
	}
	// Published before the consumers run, so that the main topic's records
	// have the first positions (a JetStream stream numbers every subject).
	rg.publish(t, "always", "poison", "repairable", "ok-1")
	run(t, cs...)

	s, err := dlq.New(d, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	letters := waitLetters(t, s, "always", "poison", "repairable")
	want := map[string]struct {
		pos, class, text string
		attempts         int
	}{
		"always":     {rg.position(0), "transient", "gave up after 3 attempts: always: downstream 503 (attempt 3)", 3},
		"poison":     {rg.position(1), "permanent", "permanent: poison: unknown event type", 1},
		"repairable": {rg.position(2), "permanent", "permanent: repairable: schema v2 not supported yet", 1},
	}
	for id, w := range want {
		ls := letters[id]
		if len(ls) != 1 {
			t.Errorf("%s: %d letters, want 1", id, len(ls))
			continue
		}
		l := ls[0]
		if l.Consumer != "billing" || l.Source != rg.topic || l.Position != w.pos || l.State != dlq.Parked {
			t.Errorf("%s: letter consumer %q source %q position %q state %s, want billing, %s, %s, parked",
				id, l.Consumer, l.Source, l.Position, l.State, rg.topic, w.pos)
		}
		if l.ErrorClass != w.class || l.Error != w.text || l.Attempts != w.attempts {
			t.Errorf("%s: letter class %q error %q attempts %d, want %q %q %d", id, l.ErrorClass, l.Error, l.Attempts, w.class, w.text, w.attempts)
		}
		if string(l.Payload) != `{"id":"`+id+`"}` || l.Key != "order-1" {
			t.Errorf("%s: letter payload %q key %q", id, l.Payload, l.Key)
		}
		for k, v := range map[string]string{"idem-original-topic": rg.topic, "idem-original-position": w.pos,
			"idem-error-class": w.class} {
			if got := l.Headers[k]; got != v {
				t.Errorf("%s: letter header %s = %q, want %q", id, k, got, v)
			}
		}
		if rg.kafka && (l.Headers["idem-original-partition"] != "0" || l.Headers[origin.Topic] != r.DLT()) {
			t.Errorf("%s: letter headers %v: want partition 0 and origin topic %s", id, l.Headers, r.DLT())
		}
		if !hasOrigin(l.Headers) {
			t.Errorf("%s: letter headers %v carry no %s* coordinates of the dead-letter record", id, l.Headers, origin.Prefix)
		}
	}
	j.waitFor(t, time.Minute, "ok-1")
	if n := effects(t, d, "ok-1"); n != 1 {
		t.Errorf("ok-1: %d effects, want 1", n)
	}

	// A second copy of poison's dead-letter record (the retry stage crashed
	// between its publish and its ack) parks no second letter; the
	// sentinel behind it shows the copy was consumed.
	p := letters["poison"][0]
	dup := idem.Message{ID: "poison", Subject: r.DLT(), Key: p.Key, Payload: p.Payload, Headers: maps.Clone(p.Headers)}
	for k := range dup.Headers {
		if origin.IsHeader(k) {
			delete(dup.Headers, k)
		}
	}
	dup.Headers[broker.HeaderRedrive] = "copy" // JetStream would drop a repeated message id
	sentinel := idem.Message{ID: "dlt-sentinel", Subject: r.DLT(), Payload: []byte(`{}`),
		Headers: map[string]string{"idem-original-topic": rg.topic, "idem-error-class": "invalid_input",
			"idem-error-message": "bad"}}
	if err := rg.pub.Publish(ctx, dup, sentinel); err != nil {
		t.Fatal(err)
	}
	letters = waitLetters(t, s, "dlt-sentinel")
	if ls := letters["poison"]; len(ls) != 1 || ls[0].ID != p.ID {
		t.Errorf("poison after a duplicate dead-letter record: %d letters %+v, want the one letter %d", len(ls), ls, p.ID)
	}
	if l := letters["dlt-sentinel"][0]; l.ErrorClass != "invalid_input" || l.Error != "bad" || l.Source != rg.topic {
		t.Errorf("sentinel letter: class %q error %q source %q", l.ErrorClass, l.Error, l.Source)
	}

	// The fix is deployed; the operator redrives repairable's letter: it
	// goes back to the main topic, not the dead-letter topic, and the main
	// consumer applies it once.
	broken.Store(false)
	l, err := s.Redrive(ctx, letters["repairable"][0].ID, "test", rg.pub)
	if err != nil {
		t.Fatal(err)
	}
	if l.Message().Subject != rg.topic {
		t.Errorf("redrive published to %q, want the main topic %q", l.Message().Subject, rg.topic)
	}
	es := j.waitFor(t, time.Minute, "repairable")
	if ok := es[done(es, "repairable")]; ok.topic != rg.topic {
		t.Errorf("repairable succeeded via %s, want the main topic %s", ok.topic, rg.topic)
	}
	if n := effects(t, d, "repairable"); n != 1 {
		t.Errorf("repairable: %d effects after the redrive, want 1", n)
	}
	if got, err := s.Get(ctx, l.ID); err != nil || got.State != dlq.Redriven {
		t.Errorf("letter after redrive: %v %v, want redriven", got.State, err)
	}

	// Redriven while still broken, always fails again: it travels the retry
	// topics anew (its original-* headers name its new position on the main
	// topic) and parks a new letter beside the redriven one.
	old := letters["always"][0]
	if _, err := s.Redrive(ctx, old.ID, "test", rg.pub); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for len(letters["always"]) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("always: no second letter after its redrive failed again: %+v", letters["always"])
		}
		time.Sleep(20 * time.Millisecond)
		letters = waitLetters(t, s)
	}
	if ls := letters["always"]; len(ls) != 2 || ls[0].ID != old.ID || ls[0].State != dlq.Redriven || ls[1].State != dlq.Parked {
		t.Errorf("always after a failed redrive: %+v, want its redriven letter and a new parked one", ls)
	} else if nl := ls[1]; nl.Position == old.Position || nl.Headers["idem-original-position"] != nl.Position ||
		nl.Source != rg.topic || nl.Attempts != 3 {
		t.Errorf("always's new letter: source %q position %q (header %q) attempts %d; the first was at %q",
			nl.Source, nl.Position, nl.Headers["idem-original-position"], nl.Attempts, old.Position)
	}
	for id, ls := range letters {
		if id != "always" && len(ls) != 1 {
			t.Errorf("%s: %d letters at the end, want 1", id, len(ls))
		}
	}
}

func hasOrigin(h map[string]string) bool {
	for k := range h {
		if origin.IsHeader(k) {
			return true
		}
	}
	return false
}

// waitLetters polls the dead-letter store until each of ids has a letter
// (a bound on the wait, not an assertion on time) and returns every
// letter of consumer billing by message id.
func waitLetters(t *testing.T, s *dlq.Store[any], ids ...string) map[string][]dlq.Letter {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		all, err := s.List(context.Background(), dlq.Filter{Consumer: "billing", Limit: -1})
		if err != nil {
			t.Fatal(err)
		}
		by := map[string][]dlq.Letter{}
		for _, l := range all {
			by[l.MessageID] = append(by[l.MessageID], l)
		}
		missing := ""
		for _, id := range ids {
			if len(by[id]) == 0 {
				missing = id
			}
		}
		if missing == "" {
			return by
		}
		if time.Now().After(deadline) {
			t.Fatalf("no letter for %s after a minute: %v", missing, by)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRecordedError(t *testing.T) {
	for _, class := range []string{"permanent", "invalid_input", "fingerprint_mismatch", "timeout", "canceled", "panic", "transient"} {
		err := retrytopic.RecordedError(map[string]string{"idem-error-class": class, "idem-error-message": "boom"})
		if got := idem.ErrorClass(err); got != class {
			t.Errorf("class %s: ErrorClass = %s", class, got)
		}
		if err.Error() != "boom" {
			t.Errorf("class %s: text %q", class, err.Error())
		}
	}
	if err := retrytopic.RecordedError(nil); idem.ErrorClass(err) != "transient" || !strings.Contains(err.Error(), "idem-error-message") {
		t.Errorf("no headers: %v (%s)", err, idem.ErrorClass(err))
	}
}

// Two consumers of the dead-letter topic (two groups, so each receives
// every record) park two copies of each of n records concurrently: four
// parks per message, one letter per message.
func TestDeadLettersConcurrentCopies(t *testing.T) {
	t.Parallel()
	eachDriverAndBroker(t, []time.Duration{50 * time.Millisecond}, testConcurrentCopies)
}

func testConcurrentCopies(t *testing.T, d store.Driver[any], rg *rig, r *retrytopic.Retrier) {
	const n = 8
	ib, err := inbox.New(d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var counters [2]parkCounter
	var cs []*consumer.Consumer[any]
	for i, group := range []string{"billing-dlt-a", "billing-dlt-b"} {
		c, err := retrytopic.DeadLetters(ib, r, consumer.Config[any]{Name: "billing", FetchWait: 200 * time.Millisecond,
			Concurrency: 2, Observer: &counters[i]}, rg.subscribe(t, group, r.DLT()))
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	var msgs []idem.Message
	for i := range n {
		for copyNo := range 2 {
			id := fmt.Sprintf("poison-%d", i)
			msgs = append(msgs, idem.Message{ID: id, Subject: r.DLT(), Key: "order-1", Payload: []byte(`{"id":"` + id + `"}`),
				Headers: map[string]string{"idem-original-topic": rg.topic, "idem-attempt": "2",
					"idem-error-class": "permanent", "idem-error-message": "permanent: bad",
					broker.HeaderRedrive: fmt.Sprintf("copy-%d", copyNo)}})
		}
	}
	if err := rg.pub.Publish(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	run(t, cs...)
	deadline := time.Now().Add(time.Minute)
	for counters[0].parked.Load() < 2*n || counters[1].parked.Load() < 2*n {
		if time.Now().After(deadline) {
			t.Fatalf("parked %d and %d records, want %d each", counters[0].parked.Load(), counters[1].parked.Load(), 2*n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s, err := dlq.New(d, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	letters := waitLetters(t, s)
	if len(letters) != n {
		t.Errorf("%d messages with letters, want %d", len(letters), n)
	}
	for id, ls := range letters {
		// Each park of a parked letter counts an attempt more (dlq's upsert).
		if len(ls) != 1 || ls[0].Attempts < 2 || ls[0].Source != rg.topic || ls[0].ErrorClass != "permanent" || ls[0].Error != "permanent: bad" {
			t.Errorf("%s: %+v, want one letter of source %s, permanent: bad", id, ls, rg.topic)
		}
	}
}

// parkCounter is an idem.Observer counting dead letters parked.
type parkCounter struct {
	obs.NopObserver
	parked atomic.Int64
}

func (c *parkCounter) DeadLetteredContext(context.Context, string, string) {
	c.parked.Add(1)
}
