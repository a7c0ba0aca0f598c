package consumertest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemamqp"
	"github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/broker/idemjetstream/embedded"
	"github.com/idemkit/idem/broker/idemkafka"
	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/consumer/consumertest"
	"github.com/idemkit/idem/internal/origin"
)

// ackWait is every target's ack wait: an unacknowledged delivery comes
// back after about that long.
const ackWait = time.Second

// subscription is every target's subscription name (durable, group,
// queue suffix).
const subscription = "conformance"

func unique() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

const number = `^[0-9]+$`

func TestSuiteMemory(t *testing.T) {
	t.Parallel()
	consumertest.Run(t, consumertest.Target{Setup: func(t *testing.T) consumertest.Env {
		b, err := memory.New(memory.Config{AckWait: ackWait})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		subject := "orders." + unique()
		return consumertest.Env{
			Publisher: b.Publisher(),
			Subject:   subject,
			Subscribe: func(t *testing.T) broker.Subscriber {
				s, err := b.Subscribe(subject, subscription)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			Origin: map[string]string{origin.Subject: "^" + regexp.QuoteMeta(subject) + "$", origin.Seq: number},
		}
	}})
}

func TestSuiteJetStreamEmbedded(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	consumertest.Run(t, jetStreamTarget(srv.ClientURL()))
}

func TestSuiteJetStreamReal(t *testing.T) {
	t.Parallel()
	url := os.Getenv("IDEM_TEST_NATS_URL")
	if url == "" {
		t.Skip("IDEM_TEST_NATS_URL not set; export IDEM_TEST_NATS_URL=nats://127.0.0.1:4222 to run against a NATS server with JetStream")
	}
	consumertest.Run(t, jetStreamTarget(url))
}

// jetStreamTarget gives each subtest its own stream (memory storage) and
// durable pull consumer on the server at url.
func jetStreamTarget(url string) consumertest.Target {
	return consumertest.Target{Setup: func(t *testing.T) consumertest.Env {
		nc, j, err := idemjetstream.Dial(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		id := unique()
		stream, subject := "CONFORM_"+strings.ToUpper(id), "conform."+id
		if _, err := idemjetstream.EnsureStream(t.Context(), j, js.StreamConfig{Name: stream, Subjects: []string{subject},
			Storage: js.MemoryStorage}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = j.DeleteStream(context.Background(), stream) })
		pub, err := idemjetstream.NewPublisher(j, idemjetstream.PublisherConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return consumertest.Env{
			Publisher: pub,
			Subject:   subject,
			// Each subscriber has its own connection, closed with it (a
			// process that stops takes its connection along).
			Subscribe: func(t *testing.T) broker.Subscriber {
				nc, j, err := idemjetstream.Dial(url)
				if err != nil {
					t.Fatal(err)
				}
				s, err := idemjetstream.NewSubscriber(t.Context(), j, idemjetstream.SubscriberConfig{Stream: stream,
					Durable: subscription, AckWait: ackWait})
				if err != nil {
					nc.Close()
					t.Fatal(err)
				}
				return &connSubscriber{Subscriber: s, close: nc.Close}
			},
			Origin: map[string]string{
				origin.Stream:    "^" + stream + "$",
				origin.StreamSeq: `^[1-9][0-9]*$`,
				origin.Consumer:  "^" + subscription + "$",
				origin.Subject:   "^" + regexp.QuoteMeta(subject) + "$",
			},
		}
	}}
}

// Kafka runs on franz-go's in-process kfake cluster: three partitions per
// topic, a consumer group per subtest.
func TestSuiteKafka(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	consumertest.Run(t, consumertest.Target{Setup: func(t *testing.T) consumertest.Env {
		pub, err := idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: addrs})
		if err != nil {
			t.Fatal(err)
		}
		topic := "conform-" + unique()
		if err := idemkafka.EnsureTopic(t.Context(), pub.Client(), topic, 3, 1); err != nil {
			t.Fatal(err)
		}
		return consumertest.Env{
			Publisher: pub,
			Subject:   topic,
			Subscribe: func(t *testing.T) broker.Subscriber {
				s, err := idemkafka.NewSubscriber(idemkafka.SubscriberConfig{
					Brokers: addrs, Group: topic + "-" + subscription, Topics: []string{topic}, AckWait: ackWait,
					Opts: []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond)},
				})
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			Origin: map[string]string{
				origin.Topic:     "^" + topic + "$",
				origin.Partition: `^[0-2]$`,
				origin.Offset:    number,
			},
		}
	}})
}

// RabbitMQ: each subtest publishes to amq.topic with a fresh routing key,
// consumed from one queue bound to it (deleted after the test).
func TestSuiteRabbitMQ(t *testing.T) {
	t.Parallel()
	url := os.Getenv("IDEM_TEST_AMQP_URL")
	if url == "" {
		t.Skip("IDEM_TEST_AMQP_URL not set; export IDEM_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ to run against RabbitMQ")
	}
	consumertest.Run(t, consumertest.Target{Setup: func(t *testing.T) consumertest.Env {
		subject := "conform." + unique()
		queue := subject + "." + subscription
		pub, err := idemamqp.NewPublisher(idemamqp.PublisherConfig{URL: url, Exchange: "amq.topic"})
		if err != nil {
			t.Fatal(err)
		}
		if err := idemamqp.DeclareQueue(url, idemamqp.QueueConfig{Name: queue, Exchange: "amq.topic", RoutingKey: subject}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = idemamqp.DeleteQueue(url, queue) })
		return consumertest.Env{
			Publisher: pub,
			Subject:   subject,
			Subscribe: func(t *testing.T) broker.Subscriber {
				s, err := idemamqp.NewSubscriber(idemamqp.SubscriberConfig{URL: url, Queue: queue, AckWait: ackWait, Prefetch: 20})
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			Origin: map[string]string{
				origin.Queue:       "^" + regexp.QuoteMeta(queue) + "$",
				origin.DeliveryTag: `^[1-9][0-9]*$`,
				origin.Exchange:    `^amq\.topic$`,
				origin.RoutingKey:  "^" + regexp.QuoteMeta(subject) + "$",
			},
		}
	}})
}

// connSubscriber closes its connection with the subscriber.
type connSubscriber struct {
	broker.Subscriber
	close func()
}

func (s *connSubscriber) Close() error {
	err := s.Subscriber.Close()
	s.close()
	return err
}
