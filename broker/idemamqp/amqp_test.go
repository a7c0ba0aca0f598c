package idemamqp_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/brokertest"
	"github.com/idemkit/idem/broker/idemamqp"
)

const ackWait = 500 * time.Millisecond

func amqpURL(t *testing.T) string {
	url := os.Getenv("IDEM_TEST_AMQP_URL")
	if url == "" {
		t.Skip("IDEM_TEST_AMQP_URL not set; export IDEM_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ to run against RabbitMQ")
	}
	return url
}

func unique() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// The suite publishes to amq.topic with the subject as routing key; each
// subscription name is a queue bound to it, deleted after the test.
func TestConformanceRabbitMQ(t *testing.T) {
	url := amqpURL(t)
	brokertest.Run(t, func(t *testing.T) brokertest.Harness {
		subject := "idemtest." + unique()
		pub, err := idemamqp.NewPublisher(idemamqp.PublisherConfig{URL: url, Exchange: "amq.topic"})
		if err != nil {
			t.Fatal(err)
		}
		return brokertest.Harness{
			Publisher: pub,
			Subject:   subject,
			AckWait:   ackWait,
			Subscribe: func(t *testing.T, name string) broker.Subscriber {
				q := subject + "." + name
				if err := idemamqp.DeclareQueue(url, idemamqp.QueueConfig{Name: q, Exchange: "amq.topic", RoutingKey: subject}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = idemamqp.DeleteQueue(url, q) })
				s, err := idemamqp.NewSubscriber(idemamqp.SubscriberConfig{URL: url, Queue: q, AckWait: ackWait})
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
		}
	})
}

func TestUnroutableIsAnError(t *testing.T) {
	url := amqpURL(t)
	pub, err := idemamqp.NewPublisher(idemamqp.PublisherConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	err = pub.Publish(t.Context(), idem.Message{ID: "x", Subject: "no-such-queue-" + unique()})
	if !errors.Is(err, idemamqp.ErrUnroutable) || !errors.Is(err, broker.ErrNoRoute) || !idem.IsPermanent(err) || errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("got %v, want a permanent ErrUnroutable (broker.ErrNoRoute), not ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), `routing key "no-such-queue-`) {
		t.Fatalf("the error does not name the routing key: %v", err)
	}
	// The publisher recovers on the next call.
	q := "idemtest.direct." + unique()
	if err := idemamqp.DeclareQueue(url, idemamqp.QueueConfig{Name: q, Transient: true}); err != nil {
		t.Fatal(err)
	}
	defer idemamqp.DeleteQueue(url, q)
	if err := pub.Publish(t.Context(), idem.Message{ID: "y", Subject: q}); err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := idemamqp.NewPublisher(idemamqp.PublisherConfig{}); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatal(err)
	}
	if _, err := idemamqp.NewSubscriber(idemamqp.SubscriberConfig{URL: "amqp://x"}); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatal(err)
	}
}
