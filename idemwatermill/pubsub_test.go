package idemwatermill_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/idemkit/idem/idemwatermill"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/outbox"
)

// The pair under Watermill's pub/sub suite: the Publisher writes each
// Publish to the outbox of a fresh SQLite store (in a transaction of its
// own, PublisherConfig.OwnTx, since the suite's messages carry none), and
// the subscriber is a persistent gochannel that idem's relay publishes the
// committed events to through a RelayPublisher. What reaches the subscriber
// went through the outbox and the relay.
//
// Its features, declared as they are:
//   - ExactlyOnceDelivery false: the relay publishes at least once (a crash
//     between the broker's ack and the mark publishes again); consumers
//     dedup with the Middleware.
//   - GuaranteedOrder false: the relay keeps the order per ordering key,
//     but the gochannel behind it hands stored and new messages to a
//     subscriber concurrently, as its own suite declares.
//   - Persistent false, RequireSingleInstance true, ConsumerGroups false:
//     the gochannel lives in one pair's memory.
//   - ForceShort: every Publish of the suite is a SQLite transaction of its
//     own (a commit to disk each); its long variants (5000 and 10000
//     one-message Publish calls) take minutes on two cores.
var pairFeatures = tests.Features{
	ForceShort:            true,
	ConsumerGroups:        false,
	ExactlyOnceDelivery:   false,
	GuaranteedOrder:       false,
	Persistent:            false,
	RequireSingleInstance: true,
}

// relayed is the subscriber side of a pair: the gochannel the relay
// publishes to, and the relay, stopped by Close.
type relayed struct {
	*gochannel.GoChannel
	stopOnce sync.Once
	stop     func() error
}

func (r *relayed) Close() error {
	var err error
	r.stopOnce.Do(func() { err = r.stop() })
	if cerr := r.GoChannel.Close(); err == nil {
		err = cerr
	}
	return err
}

func newPair(t *testing.T) (message.Publisher, message.Subscriber) {
	d := testdb.SQLite(t)
	ob, err := outbox.New(d, outbox.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := idemwatermill.NewPublisher(d, ob, idemwatermill.PublisherConfig{OwnTx: true})
	if err != nil {
		t.Fatal(err)
	}
	gc := gochannel.NewGoChannel(gochannel.Config{Persistent: true, OutputChannelBuffer: 10000}, watermill.NopLogger{})
	relay, err := outbox.NewRelay(d, idemwatermill.NewRelayPublisher(gc, idemwatermill.RelayPublisherConfig{}),
		outbox.RelayConfig{PollInterval: 10 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	sub := &relayed{GoChannel: gc, stop: func() error { cancel(); return <-done }}
	t.Cleanup(func() { _ = sub.Close() })
	return pub, sub
}

// TestPubSub runs Watermill's pub/sub suite (pubsub/tests) on the pair,
// test by test, so that the ones that do not apply are skipped with their
// reason. The suite skips by itself those its features rule out: order
// (TestPublishSubscribeInOrder, TestNoAck), persistence
// (TestContinueAfterSubscribeClose), old messages for new subscribers,
// consumer groups and reconnects (no restart command).
func TestPubSub(t *testing.T) {
	type suiteTest func(*testing.T, tests.TestContext, tests.PubSubConstructor)
	for _, c := range []struct {
		name string
		fn   suiteTest
		skip string
	}{
		{"TestPublishSubscribe", tests.TestPublishSubscribe, ""},
		{"TestConcurrentSubscribe", tests.TestConcurrentSubscribe, ""},
		{"TestConcurrentSubscribeMultipleTopics", tests.TestConcurrentSubscribeMultipleTopics, "it publishes copies of each message, with one UUID, to 20 topics: " +
			"a UUID is one outbox event, so its copy for a second topic is refused (idem.ErrFingerprintMismatch) rather than dropped"},
		{"TestResendOnError", tests.TestResendOnError, ""},
		{"TestNoAck", tests.TestNoAck, ""},
		{"TestContinueAfterSubscribeClose", tests.TestContinueAfterSubscribeClose, ""},
		{"TestConcurrentClose", tests.TestConcurrentClose, "it reads, through a pair created later, what an earlier pair published: " +
			"that needs a broker shared between instances, and the gochannel behind the relay lives in one pair (RequireSingleInstance)"},
		{"TestContinueAfterErrors", tests.TestContinueAfterErrors, ""},
		{"TestPublishSubscribeInOrder", tests.TestPublishSubscribeInOrder, ""},
		{"TestPublisherClose", tests.TestPublisherClose, ""},
		{"TestTopic", tests.TestTopic, ""},
		{"TestMessageCtx", tests.TestMessageCtx, "it publishes one message (one UUID) twice and expects two deliveries: " +
			"the outbox writes a UUID once, a second Publish of it is a retried publish and accepted as a duplicate (by design)"},
		{"TestSubscribeCtx", tests.TestSubscribeCtx, ""},
		{"TestNewSubscriberReceivesOldMessages", tests.TestNewSubscriberReceivesOldMessages, ""},
		{"TestReconnect", tests.TestReconnect, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.skip != "" {
				t.Skip(c.skip)
			}
			t.Parallel()
			c.fn(t, tests.TestContext{TestID: tests.NewTestID(), Features: pairFeatures}, newPair)
		})
	}
	t.Run("TestConsumerGroups", func(t *testing.T) {
		tests.TestConsumerGroups(t, tests.TestContext{TestID: tests.NewTestID(), Features: pairFeatures}, nil)
	})
}
