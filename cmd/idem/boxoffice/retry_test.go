package boxoffice_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemkafka"
	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/consumer/retrytopic"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
)

// Retry topics paired with the version guard: the search projection's
// older availability (version 1) fails once and waits in
// order-events-retry-1s while the newer one (version 2) behind it is
// applied; when version 1 is retried it is stale and changes nothing, so
// the projection keeps the newest seats left.
func TestRetryTopicsWithVersionGuard(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testRetryTopicsWithVersionGuard(t, e.D) }, testdb.NoSQLPostgres)
}

func testRetryTopicsWithVersionGuard(t *testing.T, d store.Driver[any]) {
	ctx := context.Background()
	const older, newer = "ord_00000000-0000-4000-8000-000000000001", "ord_00000000-0000-4000-8000-000000000002"
	mb, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	sys, err := boxoffice.New(ctx, d, boxoffice.Config{Broker: boxoffice.MemoryBroker{B: mb}, Roles: []boxoffice.Role{boxoffice.RoleSearch},
		Hooks: boxoffice.Hooks{Fault: func(consumer string, oc boxoffice.OrderConfirmed, msg idem.Message) error {
			if consumer == boxoffice.ConsumerSearch && oc.OrderID == older && msg.Attempt == 1 {
				return errors.New("search index unavailable")
			}
			return nil
		}}})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	addrs := cluster.ListenAddrs()
	pub, err := idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: addrs})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	delays := []time.Duration{time.Second}
	for _, tp := range []string{boxoffice.Subject, "order-events-retry-1s", retrytopic.DLT(boxoffice.Subject)} {
		if err := idemkafka.EnsureTopic(ctx, pub.Client(), tp, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	subscribe := func(group, topic string) (broker.Subscriber, error) {
		return idemkafka.NewSubscriber(idemkafka.SubscriberConfig{Brokers: addrs, Group: group, Topics: []string{topic},
			Opts: []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond)}})
	}
	main, err := subscribe("search", boxoffice.Subject)
	if err != nil {
		t.Fatal(err)
	}
	defer main.Close()
	var subs []broker.Subscriber
	defer func() {
		for _, s := range subs {
			s.Close()
		}
	}()
	r, run, err := sys.RetryTopics(boxoffice.ConsumerSearch, pub, main, func(topic string, _ time.Duration) (broker.Subscriber, error) {
		s, err := subscribe("search-"+topic, topic)
		if err == nil {
			subs = append(subs, s)
		}
		return s, err
	}, delays)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.RetryTopics(); len(got) != 1 || got[0] != "order-events-retry-1s" {
		t.Fatalf("retry topics %v", got)
	}
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- run(rctx) }()
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	for i, id := range []string{older, newer} {
		oc := boxoffice.OrderConfirmed{Order: boxoffice.Order{OrderID: id, Tenant: "t1", EventID: "show-1", CustomerEmail: "ana@example.com",
			Seats: 1, TotalCents: 1000, Currency: "BRL", Status: boxoffice.StatusConfirmed, CreatedAt: time.Now()},
			SeatsLeft: int64(9 - i), EventVersion: int64(1 + i)}
		payload, _ := json.Marshal(oc)
		ev := outbox.Event{ID: "ev-" + id, Source: "boxoffice-test", Type: boxoffice.EventTypeOrderConfirmed, Topic: boxoffice.Subject,
			Key: "show-1", Payload: payload, DataContentType: "application/json", Time: time.Now()}
		if err := pub.Publish(ctx, ev.Message()); err != nil {
			t.Fatal(err)
		}
	}

	deadline := time.Now().Add(30 * time.Second)
	for sys.StaleUpdates() < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the older availability was never retried (stale updates %d)", sys.StaleUpdates())
		}
		time.Sleep(20 * time.Millisecond)
	}
	seats := testdb.Count(t, d, `SELECT seats_left FROM event_availability WHERE event_id = $1`, "show-1")
	version := testdb.Count(t, d, `SELECT version FROM event_availability WHERE event_id = $1`, "show-1")
	if seats != 8 || version != 2 {
		t.Errorf("event_availability of show-1: seats_left %d version %d, want 8 and 2 (the newer event)", seats, version)
	}
	if n := sys.StaleUpdates(); n != 1 {
		t.Errorf("%d stale updates, want 1 (the retried older event)", n)
	}
}
