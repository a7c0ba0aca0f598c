// Package consumertest is the conformance suite of idem's consumer runtime
// (package consumer) on a broker adapter: what broker/brokertest proves of
// the adapter alone, this proves of the adapter, the inbox and a real
// database together.
//
// The cases, each on SQLite and on PostgreSQL (pgx, when
// IDEM_TEST_POSTGRES_URL is set), with real goroutines:
//
//   - AckAfterCommit: every Ack (and every duplicate's Ack) happens once the
//     message's effect is committed and visible to another connection; a
//     failed attempt leaves no effect.
//   - CrashBetweenCommitAndAck: a consumer that commits and dies before
//     acking; the broker redelivers to its successor, whose inbox
//     suppresses the duplicate: one effect, the handler not run again.
//   - NakDelay: a transient failure is negatively acknowledged with the
//     backoff delay and redelivered after that delay, never before.
//   - DeadLetter: after MaxAttempts transient failures, and at once for a
//     permanent error, the message is parked in the dead-letter store with
//     its payload, headers and the broker's own coordinates (broker.Locator:
//     Kafka topic/partition/offset, JetStream stream sequence, AMQP queue
//     and delivery tag), and terminated.
//   - TwoInstances: two consumers of one name on one subscription (a Kafka
//     group of two members, two pull subscribers on one JetStream durable,
//     two AMQP consumers of one queue) process a stream of messages, both
//     doing work, each message's effect exactly once, none lost.
//   - RebalanceMidBatch: member a is in the middle of a batch of 8 (its
//     handler held inside the batch's transaction) when member b joins and
//     more messages arrive; b receives records (on Kafka: the group
//     rebalanced); then a leaves, still mid-batch. b receives a's records
//     again (Kafka: a's partitions from their committed offsets; JetStream:
//     after the ack wait; AMQP: requeued) — before a's transaction ends,
//     except on SQLite, whose one writer is a — and a finishes its batch
//     after leaving. Every effect exactly once, none lost.
//
// An adapter's test calls [Run] with a [Target]:
//
//	func TestConsumerKafka(t *testing.T) {
//		consumertest.Run(t, consumertest.Target{Setup: func(t *testing.T) consumertest.Env { … }})
//	}
package consumertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/origin"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// Target is one broker under test.
type Target struct {
	// Setup prepares a fresh subject (stream, topic, queue binding) for
	// one subtest and returns how to use it. It is called once per subtest,
	// concurrently with the other subtests.
	Setup func(t *testing.T) Env
}

// Env is what the suite needs for one subtest.
type Env struct {
	// Publisher publishes to Subject. The suite closes it at the end of
	// the subtest.
	Publisher broker.Publisher
	// Subject is the fresh subject / topic / routing key to publish to.
	Subject string
	// Subscribe returns a new subscriber on the subtest's one subscription
	// (a durable JetStream consumer, a Kafka consumer group, an AMQP
	// queue): every subscriber it returns shares that subscription's
	// messages. It must be callable before anything is published, and the
	// subscription must see every message published after its first
	// Subscribe. The suite closes each subscriber (Close may be called
	// twice). Keep the ack wait short (≤ 1s).
	Subscribe func(t *testing.T) broker.Subscriber
	// Origin names how the broker's coordinates of a delivery on Subject
	// look: origin header (origin.Topic, …) → regular expression its
	// value must match. Every dead letter must carry these headers. Empty
	// for a delivery without coordinates (the suite then checks none).
	Origin map[string]string
}

// consumerName is the consumer (inbox scope) of every case.
const consumerName = "conformance"

// Run runs the suite: every case in parallel, each on every store.
func Run(t *testing.T, target Target) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		{"AckAfterCommit", testAckAfterCommit},
		{"CrashBetweenCommitAndAck", testCrashBetweenCommitAndAck},
		{"NakDelay", testNakDelay},
		{"DeadLetter", testDeadLetter},
		{"TwoInstances", testTwoInstances},
		{"RebalanceMidBatch", testRebalanceMidBatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) {
				env := target.Setup(t)
				t.Cleanup(func() { _ = env.Publisher.Close() })
				testdb.Exec(t, d.D, `CREATE TABLE ct_effects (message_id text NOT NULL, instance text NOT NULL)`)
				tc.fn(t, &suite{env: env, d: d.D, sqlite: d.Name == "sqlite"})
			}, testdb.NoSQLPostgres)
		})
	}
}

// suite is one case's broker environment and store.
type suite struct {
	env    Env
	d      store.Driver[any]
	sqlite bool // one writer at a time
}

// errCrash is the simulated crash between commit and ack.
var errCrash = errors.New("consumertest: simulated crash after commit")

// effect writes msg's effect, as instance, in tx: one row per committed
// handler run (no unique key: a duplicate effect is a second row).
func (s *suite) effect(ctx context.Context, tx any, msg idem.Message, instance string) error {
	_, err := s.d.Tx(tx).Exec(ctx, `INSERT INTO ct_effects (message_id, instance) VALUES ($1, $2)`, msg.ID, instance)
	return err
}

// effects is the number of committed effects of id ("" = all).
func (s *suite) effects(t *testing.T, id string) int {
	if id == "" {
		return testdb.Count(t, s.d, `SELECT count(*) FROM ct_effects`)
	}
	return testdb.Count(t, s.d, `SELECT count(*) FROM ct_effects WHERE message_id = $1`, id)
}

// checkExactlyOnce fails t unless ids each have exactly one effect and
// there is no other.
func (s *suite) checkExactlyOnce(t *testing.T, ids []string) {
	t.Helper()
	if n := testdb.Count(t, s.d, `SELECT count(*) FROM (SELECT message_id FROM ct_effects GROUP BY message_id HAVING count(*) > 1) dup`); n != 0 {
		t.Errorf("%d messages have more than one effect", n)
	}
	if n := s.effects(t, ""); n != len(ids) {
		t.Errorf("%d effects, want %d (one per message)", n, len(ids))
	}
	for _, id := range ids {
		if n := s.effects(t, id); n != 1 {
			t.Errorf("message %s: %d effects, want 1", id, n)
		}
	}
}

// publish publishes msgs to the subject, with fresh keys so they spread
// over partitions.
func (s *suite) publish(t *testing.T, msgs ...idem.Message) {
	t.Helper()
	for i := range msgs {
		msgs[i].Subject = s.env.Subject
		if msgs[i].Key == "" {
			msgs[i].Key = "key-" + msgs[i].ID
		}
		if msgs[i].Payload == nil {
			msgs[i].Payload = []byte(`{"id":"` + msgs[i].ID + `"}`)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.env.Publisher.Publish(ctx, msgs...); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// messages returns n messages with ids prefix-0 … prefix-(n-1).
func messages(prefix string, from, n int) []idem.Message {
	out := make([]idem.Message, n)
	for i := range out {
		out[i] = idem.Message{ID: prefix + "-" + strconv.Itoa(from+i)}
	}
	return out
}

func ids(msgs []idem.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// subscribe returns a probed subscriber, closed at the end of the test.
func (s *suite) subscribe(t *testing.T) *probe {
	t.Helper()
	sub := s.env.Subscribe(t)
	t.Cleanup(func() { _ = sub.Close() })
	return &probe{Subscriber: sub, s: s, fetched: map[string]int{}, naks: map[string]nak{}}
}

// consumer builds a consumer of the suite's name on sub, with cfg's
// handler and settings, metrics counted in obs.
func (s *suite) consumer(t *testing.T, sub broker.Subscriber, obs *observer, cfg consumer.Config[any]) *consumer.Consumer[any] {
	t.Helper()
	ib, err := inbox.New(s.d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name = consumerName
	cfg.Observer = obs
	if p, ok := sub.(*probe); ok {
		if _, batches := p.Subscriber.(broker.BatchAcker); batches {
			sub = batchProbe{p} // the consumer acks batches through it, as on the bare subscriber
		}
	}
	if cfg.FetchWait == 0 {
		cfg.FetchWait = 100 * time.Millisecond
	}
	if cfg.Backoff.Base == 0 {
		cfg.Backoff = consumer.Backoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	}
	c, err := consumer.New(ib, sub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// start runs c until stop (or the end of the test). Run must return nil,
// or broker.ErrClosed when closedOK (its subscriber was closed under it).
func start(t *testing.T, c *consumer.Consumer[any], closedOK bool) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := c.Run(ctx); err != nil && !(closedOK && errors.Is(err, broker.ErrClosed)) {
			t.Errorf("Run: %v", err)
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds, failing t after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitExplained(t, what, cond, nil)
}

// waitExplained is waitFor whose failure also says what explain returns
// (when not nil), read once the wait timed out.
func waitExplained(t *testing.T, what string, cond func() bool, explain func() string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			if explain != nil {
				t.Fatalf("timed out waiting for %s: %s", what, explain())
			}
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Every Ack follows the commit of the message's effect; a failed attempt
// (its effect written, then an error) leaves nothing; batches and single
// deliveries alike.
func testAckAfterCommit(t *testing.T, s *suite) {
	for _, batch := range []int{1, 4} {
		t.Run(fmt.Sprintf("batch%d", batch), func(t *testing.T) {
			testdb.Exec(t, s.d, `DELETE FROM ct_effects`)
			sub := s.subscribe(t)
			obs := &observer{}
			var failed atomic.Bool
			var runs atomic.Int64 // of prefix-3
			prefix := "ack" + strconv.Itoa(batch)
			c := s.consumer(t, sub, obs, consumer.Config[any]{BatchSize: batch, Concurrency: 2,
				Handler: func(ctx context.Context, tx any, msg idem.Message) error {
					if err := s.effect(ctx, tx, msg, "a"); err != nil {
						return err
					}
					if msg.ID == prefix+"-3" {
						runs.Add(1)
					}
					if msg.ID == prefix+"-3" && failed.CompareAndSwap(false, true) {
						return errors.New("downstream timeout after writing the effect")
					}
					return nil
				}})
			start(t, c, false)
			msgs := messages(prefix, 0, 20)
			s.publish(t, msgs...)
			waitFor(t, "20 acks", func() bool { return sub.ackCount() == 20 })
			s.checkExactlyOnce(t, ids(msgs))
			sub.check(t)
			if !failed.Load() {
				t.Error("the failing attempt never ran")
			}
			if n := runs.Load(); n < 2 {
				t.Errorf("%s-3 handled %d times, want ≥ 2 (a failure, then the retry)", prefix, n)
			}
		})
	}
}

// A consumer commits every message's effect and dies before acking; its
// successor on the same subscription receives them again and acks them as
// duplicates without running the handler.
func testCrashBetweenCommitAndAck(t *testing.T, s *suite) {
	sub1 := s.subscribe(t)
	obs1 := &observer{}
	c1 := s.consumer(t, sub1, obs1, consumer.Config[any]{
		Handler: func(ctx context.Context, tx any, msg idem.Message) error { return s.effect(ctx, tx, msg, "first") },
		// From its first commit on, the process is dead to the broker: no
		// ack of a later redelivery (a duplicate) reaches it either.
		Hooks: consumer.Hooks{AfterCommit: func(idem.Message) error { sub1.dead.Store(true); return errCrash }},
	})
	stop1 := start(t, c1, false)
	msgs := messages("crash", 0, 5)
	s.publish(t, msgs...)
	waitFor(t, "5 effects committed by the first consumer", func() bool { return s.effects(t, "") == 5 })
	// The crash: the process stops and its connection goes away with
	// every delivery unacknowledged.
	stop1()
	_ = sub1.Close()
	if n := sub1.ackCount(); n != 0 {
		t.Fatalf("the crashed consumer acked %d messages", n)
	}

	sub2 := s.subscribe(t)
	obs2 := &observer{}
	var ran atomic.Int64
	c2 := s.consumer(t, sub2, obs2, consumer.Config[any]{
		Handler: func(ctx context.Context, tx any, msg idem.Message) error {
			ran.Add(1)
			return s.effect(ctx, tx, msg, "second")
		},
	})
	start(t, c2, false)
	waitFor(t, "5 duplicates acknowledged by the successor", func() bool { return sub2.ackCount() == 5 })
	if n := obs2.duplicates.Load(); n < 5 {
		t.Errorf("successor: %d duplicates, want 5 (one per message)", n)
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("successor ran the handler %d times, want 0", n)
	}
	s.checkExactlyOnce(t, ids(msgs))
	sub2.check(t)
	for _, m := range msgs {
		if n := sub2.fetchedCount(m.ID); n < 1 {
			t.Errorf("%s not redelivered to the successor", m.ID)
		}
	}
}

// A message failing twice is negatively acknowledged with the backoff
// delay each time and redelivered only after it; the messages behind it
// are processed meanwhile.
func testNakDelay(t *testing.T, s *suite) {
	sub := s.subscribe(t)
	obs := &observer{}
	// The handler fails nak-0's first two calls, counted here rather than
	// by msg.Attempt: a broker may count a delivery the client never got
	// (JetStream, when a pull request's expiry races the client), which
	// skips an attempt number but is not a negative acknowledgement.
	var failures atomic.Int32
	c := s.consumer(t, sub, obs, consumer.Config[any]{
		MaxAttempts: 10,
		Backoff:     consumer.Backoff{Base: 300 * time.Millisecond, Max: 300 * time.Millisecond},
		Handler: func(ctx context.Context, tx any, msg idem.Message) error {
			if msg.ID == "nak-0" && failures.Add(1) <= 2 {
				return fmt.Errorf("attempt %d: downstream unavailable", msg.Attempt)
			}
			return s.effect(ctx, tx, msg, "a")
		},
	})
	start(t, c, false)
	msgs := messages("nak", 0, 6)
	s.publish(t, msgs...)
	waitFor(t, "6 acks", func() bool { return sub.ackCount() == 6 })
	s.checkExactlyOnce(t, ids(msgs))
	sub.check(t)
	// At least: an ack wait expiring under load may add a delivery.
	if n := sub.nakCount("nak-0"); n < 2 {
		t.Errorf("nak-0 negatively acknowledged %d times, want 2", n)
	}
	if n := sub.fetchedCount("nak-0"); n < 3 {
		t.Errorf("nak-0 delivered %d times, want 3", n)
	}
	if n := obs.retries.Load(); n < 2 {
		t.Errorf("%d retries counted, want 2", n)
	}
}

// Exhausted retries and a permanent error each park the message with the
// broker's coordinates, then terminate it; the other messages flow.
func testDeadLetter(t *testing.T, s *suite) {
	ctx := context.Background()
	sub := s.subscribe(t)
	obs := &observer{}
	letters, err := dlq.New(s.d, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var runs sync.Map // message id → *atomic.Int64
	c := s.consumer(t, sub, obs, consumer.Config[any]{
		MaxAttempts: 3, DLQ: letters,
		Handler: func(ctx context.Context, tx any, msg idem.Message) error {
			n, _ := runs.LoadOrStore(msg.ID, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			switch msg.ID {
			case "dl-exhausted":
				return errors.New("downstream timeout")
			case "dl-permanent":
				return idem.Permanent(errors.New("card declined"))
			}
			return s.effect(ctx, tx, msg, "a")
		},
	})
	start(t, c, false)
	s.publish(t, idem.Message{ID: "dl-exhausted", Headers: map[string]string{"x-trace": "t-1"}},
		idem.Message{ID: "dl-permanent", Headers: map[string]string{"x-trace": "t-2"}})
	good := messages("dl-ok", 0, 3)
	s.publish(t, good...)
	// The letter commits before the delivery is terminated and the
	// observer counts it: wait for all three, not just the rows.
	waitFor(t, "2 dead letters, terminated and counted, and 3 acks", func() bool {
		n, err := letters.CountParked(ctx)
		return err == nil && n[consumerName] == 2 && sub.ackCount() == 3 &&
			sub.termCount("dl-exhausted") >= 1 && sub.termCount("dl-permanent") >= 1 && obs.deadLettered.Load() >= 2
	})
	s.checkExactlyOnce(t, ids(good))
	sub.check(t)
	ls, err := letters.List(ctx, dlq.Filter{Consumer: consumerName})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		class    string
		attempts int
		trace    string
	}{"dl-exhausted": {"transient", 3, "t-1"}, "dl-permanent": {"permanent", 1, "t-2"}}
	for _, l := range ls {
		w, ok := want[l.MessageID]
		if !ok {
			t.Errorf("unexpected letter %+v", l)
			continue
		}
		delete(want, l.MessageID)
		if l.ErrorClass != w.class || l.Attempts != w.attempts {
			t.Errorf("%s: class %q after %d attempts, want %q after %d", l.MessageID, l.ErrorClass, l.Attempts, w.class, w.attempts)
		}
		if l.Source != s.env.Subject || string(l.Payload) != `{"id":"`+l.MessageID+`"}` || l.Headers["x-trace"] != w.trace {
			t.Errorf("%s: letter source %q payload %q headers %v, want the message's", l.MessageID, l.Source, l.Payload, l.Headers)
		}
		for h, re := range s.env.Origin {
			if v, ok := l.Headers[h]; !ok || !regexp.MustCompile(re).MatchString(v) {
				t.Errorf("%s: origin header %s = %q (present %v), want a match of %s", l.MessageID, h, v, ok, re)
			}
		}
		for h := range l.Message().Headers {
			if origin.IsHeader(h) {
				t.Errorf("%s: the redrive message keeps origin header %s", l.MessageID, h)
			}
		}
		if n := sub.termCount(l.MessageID); n != 1 {
			t.Errorf("%s terminated %d times, want 1", l.MessageID, n)
		}
	}
	for id := range want {
		t.Errorf("no letter for %s", id)
	}
	for id, n := range map[string]int64{"dl-exhausted": 3, "dl-permanent": 1} {
		v, _ := runs.Load(id)
		if got := v.(*atomic.Int64).Load(); got != n {
			t.Errorf("%s: handler ran %d times, want %d", id, got, n)
		}
	}
	if n := obs.deadLettered.Load(); n != 2 {
		t.Errorf("%d dead letters counted, want 2", n)
	}
}

// Two instances of one consumer share a stream of messages: both work, and
// each message has exactly one effect.
func testTwoInstances(t *testing.T, s *suite) {
	var done [2]atomic.Int64
	subs := make([]*probe, 2)
	for i := range 2 {
		subs[i] = s.subscribe(t)
		c := s.consumer(t, subs[i], &observer{}, consumer.Config[any]{Concurrency: 2, BatchSize: 5, MaxAttempts: 100,
			Handler: func(ctx context.Context, tx any, msg idem.Message) error {
				if err := s.effect(ctx, tx, msg, strconv.Itoa(i)); err != nil {
					return err
				}
				done[i].Add(1)
				return nil
			}})
		start(t, c, false)
	}
	// Publish until both instances have processed messages (a Kafka group
	// needs a rebalance before the second member gets partitions), at
	// least 200 in all.
	var all []idem.Message
	for len(all) < 200 || done[0].Load() == 0 || done[1].Load() == 0 {
		if len(all) >= 5000 {
			t.Fatalf("5000 messages published and the instances processed %d and %d", done[0].Load(), done[1].Load())
		}
		batch := messages("two", len(all), 20)
		s.publish(t, batch...)
		all = append(all, batch...)
		time.Sleep(10 * time.Millisecond) // pace the stream
	}
	waitFor(t, fmt.Sprintf("%d effects", len(all)), func() bool {
		return testdb.Count(t, s.d, `SELECT count(DISTINCT message_id) FROM ct_effects`) == len(all)
	})
	seen := map[string]bool{}
	waitExplained(t, "every message acked", func() bool {
		clear(seen)
		for _, p := range subs {
			p.ackedIDs(seen)
		}
		return len(seen) == len(all)
	}, func() string {
		// Which messages, and whether a redelivery reached an instance
		// after the failed ack.
		var missing []string
		for _, m := range all {
			if !seen[m.ID] && len(missing) < 20 {
				missing = append(missing, fmt.Sprintf("%s (fetched %d and %d times)", m.ID, subs[0].fetchedCount(m.ID), subs[1].fetchedCount(m.ID)))
			}
		}
		return fmt.Sprintf("%d of %d never acked: %s", len(all)-len(seen), len(all), strings.Join(missing, ", "))
	})
	s.checkExactlyOnce(t, ids(all))
	for i, p := range subs {
		p.check(t)
		if done[i].Load() == 0 {
			t.Errorf("instance %d processed nothing", i)
		}
	}
}

// Member a is in the middle of a batch, its handler held inside the
// batch's transaction, when member b joins; then a leaves. b receives
// records of a's batch again; once a is released, every message has one
// effect and none is lost.
func testRebalanceMidBatch(t *testing.T, s *suite) {
	subA := s.subscribe(t)
	subA.fill = true
	held, release := make(chan struct{}), make(chan struct{})
	var holdOnce sync.Once
	cA := s.consumer(t, subA, &observer{}, consumer.Config[any]{BatchSize: 8, MaxAttempts: 1000,
		Handler: func(ctx context.Context, tx any, msg idem.Message) error {
			holdOnce.Do(func() {
				close(held)
				select {
				case <-release:
				case <-time.After(2 * time.Minute):
				}
			})
			return s.effect(ctx, tx, msg, "a")
		}})
	msgs := messages("rb", 0, 40)
	s.publish(t, msgs...) // before a starts, so its first fetch is a full batch
	start(t, cA, true)
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("member a never started a batch")
	}
	batchA := subA.firstBatch()
	if len(batchA) == 0 {
		t.Fatal("member a's first batch is empty")
	}

	// b joins while a is held mid-batch, and the stream goes on: b gets
	// records (Kafka: once the group rebalanced and gave it partitions).
	subB := s.subscribe(t)
	cB := s.consumer(t, subB, &observer{}, consumer.Config[any]{BatchSize: 8, Concurrency: 4, MaxAttempts: 1000,
		Handler: func(ctx context.Context, tx any, msg idem.Message) error { return s.effect(ctx, tx, msg, "b") }})
	start(t, cB, false)
	more := messages("rb", len(msgs), 40)
	s.publish(t, more...)
	msgs = append(msgs, more...)
	waitFor(t, "member b to receive records while a is held", func() bool { return subB.fetchedTotal() > 0 })

	// a leaves, still mid-batch. b receives a's records again (Kafka: the
	// rebalance gives it a's partitions from their committed offsets;
	// JetStream: after the ack wait; AMQP: requeued at once) while a's
	// transaction is still open — except on SQLite, whose one writer is a:
	// b's workers wait for its lock, so a goes on at once.
	_ = subA.Close()
	if !s.sqlite {
		waitFor(t, "member b to receive a record of a's held batch", func() bool {
			return slices.ContainsFunc(batchA, func(id string) bool { return subB.fetchedCount(id) > 0 })
		})
	}
	close(release)

	waitFor(t, fmt.Sprintf("%d effects", len(msgs)), func() bool {
		return testdb.Count(t, s.d, `SELECT count(DISTINCT message_id) FROM ct_effects`) == len(msgs)
	})
	waitFor(t, "every message acked by b or a", func() bool {
		seen := map[string]bool{}
		subA.ackedIDs(seen)
		subB.ackedIDs(seen)
		return len(seen) == len(msgs)
	})
	s.checkExactlyOnce(t, ids(msgs))
	subA.check(t)
	subB.check(t)
	// a's settlements after it left fail (Kafka: partition revoked;
	// JetStream, AMQP: connection closed), so b must have received a's
	// records again; a broker that accepts them (memory) may let a settle.
	ackedA := map[string]bool{}
	subA.ackedIDs(ackedA)
	again := 0
	for _, id := range batchA {
		if subB.fetchedCount(id) > 0 {
			again++
		}
	}
	t.Logf("a's held batch of %d: %d received again by b, %d acked by a", len(batchA), again, len(ackedA))
	if !slices.ContainsFunc(batchA, func(id string) bool { return subB.fetchedCount(id) > 0 }) &&
		slices.ContainsFunc(batchA, func(id string) bool { return !ackedA[id] }) {
		t.Errorf("b never received a record of a's held batch %v, and a did not ack them all", batchA)
	}
}

// probe wraps a subscriber and records what the consumer did with each
// delivery: fetches, acks (each checked against the committed effect),
// naks (the redelivery checked against the delay) and terms.
type probe struct {
	broker.Subscriber
	s    *suite
	fill bool        // fetch again until max deliveries or none (full batches)
	dead atomic.Bool // the process crashed: settlements do not reach the broker

	mu         sync.Mutex // protects the fields below
	fetched    map[string]int
	first      []string // the ids of the first non-empty fetch
	acked      []string
	termed     []string
	naks       map[string]nak // the last nak of each id not yet redelivered
	nakked     []string
	violations []string
}

type nak struct {
	at    time.Time
	delay time.Duration
}

// Fetch implements broker.Subscriber.
func (p *probe) Fetch(ctx context.Context, max int, maxWait time.Duration) ([]broker.Delivery, error) {
	ds, err := p.Subscriber.Fetch(ctx, max, maxWait)
	for p.fill && err == nil && len(ds) > 0 && len(ds) < max {
		more, merr := p.Subscriber.Fetch(ctx, max-len(ds), maxWait)
		if len(more) == 0 || merr != nil {
			break
		}
		ds = append(ds, more...)
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, d := range ds {
		id := d.Message().ID
		p.fetched[id]++
		if n, ok := p.naks[id]; ok {
			if early := n.delay - now.Sub(n.at); early > 0 {
				p.violations = append(p.violations, fmt.Sprintf("%s redelivered %s before its nak delay %s passed", id, early, n.delay))
			}
			delete(p.naks, id)
		}
		ds[i] = &probeDelivery{Delivery: d, p: p}
	}
	if p.first == nil && len(ds) > 0 {
		for _, d := range ds {
			p.first = append(p.first, d.Message().ID)
		}
	}
	return ds, err
}

func (p *probe) record(list *[]string, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	*list = append(*list, id)
}

func (p *probe) violate(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.violations = append(p.violations, fmt.Sprintf(format, args...))
}

func (p *probe) count(list *[]string, id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, v := range *list {
		if v == id || id == "" {
			n++
		}
	}
	return n
}

// ackCount is the number of distinct messages acked.
func (p *probe) ackCount() int {
	seen := map[string]bool{}
	p.ackedIDs(seen)
	return len(seen)
}
func (p *probe) nakCount(id string) int     { return p.count(&p.nakked, id) }
func (p *probe) termCount(id string) int    { return p.count(&p.termed, id) }
func (p *probe) fetchedCount(id string) int { p.mu.Lock(); defer p.mu.Unlock(); return p.fetched[id] }

func (p *probe) fetchedTotal() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.fetched)
}

func (p *probe) firstBatch() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.first)
}

func (p *probe) ackedIDs(into map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range p.acked {
		into[id] = true
	}
}

// check fails t with the violations recorded.
func (p *probe) check(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, v := range p.violations {
		t.Error(v)
	}
}

// probeDelivery records the settlement of one delivery.
type probeDelivery struct {
	broker.Delivery
	p *probe
}

// Ack checks, on another connection, that the message's effect is
// committed, then acks.
func (d *probeDelivery) Ack(ctx context.Context) error {
	if d.p.dead.Load() {
		return errCrash
	}
	d.checkCommitted(ctx)
	err := d.Delivery.Ack(ctx)
	if err == nil {
		d.p.record(&d.p.acked, d.Message().ID)
	}
	return err
}

// checkCommitted records a violation unless the message's effect is
// committed (read on another connection).
func (d *probeDelivery) checkCommitted(ctx context.Context) {
	id := d.Message().ID
	var n int64
	if err := d.p.s.d.Pool().QueryRow(ctx, `SELECT count(*) FROM ct_effects WHERE message_id = $1`, id).Scan(&n); err != nil {
		d.p.violate("ack of %s: reading its effect: %v", id, err)
	} else if n == 0 {
		d.p.violate("%s acked before its effect was committed", id)
	}
}

// batchProbe is the probe of a subscriber that acks batches
// (broker.BatchAcker): the consumer hands it a batch's committed
// deliveries, each checked as probeDelivery.Ack checks one, then acked
// with the wrapped subscriber's AckBatch.
type batchProbe struct{ *probe }

// AckBatch implements broker.BatchAcker.
func (b batchProbe) AckBatch(ctx context.Context, ds []broker.Delivery) error {
	if b.dead.Load() {
		return errCrash
	}
	inner := make([]broker.Delivery, 0, len(ds))
	for _, d := range ds {
		pd, ok := d.(*probeDelivery)
		if !ok {
			b.violate("AckBatch of a delivery the probe did not hand out (%T)", d)
			continue
		}
		pd.checkCommitted(ctx)
		inner = append(inner, pd.Delivery)
	}
	err := b.Subscriber.(broker.BatchAcker).AckBatch(ctx, inner)
	for i, d := range inner {
		if broker.BatchAcked(err, i) {
			b.record(&b.acked, d.Message().ID)
		}
	}
	if len(inner) != len(ds) && err != nil {
		// err's entries follow inner, not ds: every ack is in doubt.
		return fmt.Errorf("probe: every ack in doubt, some deliveries were not the probe's: %v", err)
	}
	return err
}

// Nak records the delay, then naks.
func (d *probeDelivery) Nak(ctx context.Context, delay time.Duration) error {
	if d.p.dead.Load() {
		return errCrash
	}
	id := d.Message().ID
	d.p.mu.Lock()
	d.p.naks[id] = nak{at: time.Now(), delay: delay}
	d.p.nakked = append(d.p.nakked, id)
	d.p.mu.Unlock()
	return d.Delivery.Nak(ctx, delay)
}

// Term records the termination, then terms.
func (d *probeDelivery) Term(ctx context.Context) error {
	if d.p.dead.Load() {
		return errCrash
	}
	d.p.record(&d.p.termed, d.Message().ID)
	return d.Delivery.Term(ctx)
}

// Origin forwards the wrapped delivery's coordinates (broker.Locator).
func (d *probeDelivery) Origin() map[string]string {
	return maps.Clone(origin.Of(d.Delivery))
}

// observer counts the consumer's metrics the suite asserts on.
type observer struct {
	obs.NopObserver
	processed, duplicates, retries, deadLettered atomic.Int64
}

func (o *observer) Processed(string) { o.processed.Add(1) }
func (o *observer) Retry(string)     { o.retries.Add(1) }
func (o *observer) DuplicateContext(context.Context, string, string) {
	o.duplicates.Add(1)
}
func (o *observer) DeadLetteredContext(context.Context, string, string) {
	o.deadLettered.Add(1)
}

var _ idem.Observer = (*observer)(nil)
