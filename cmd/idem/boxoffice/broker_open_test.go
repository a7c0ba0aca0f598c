package boxoffice_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/consumer"
)

// TestOpenOnEveryBroker: Open runs the whole system on Kafka (the
// in-process cluster) and RabbitMQ (IDEM_TEST_AMQP_URL): an order placed
// through the API is invoiced and e-mailed once, through the relay, the
// broker and the consumers, and the system's horizons name the broker's
// retention (the topic's retention.ms, each queue's x-message-ttl) and no
// duplicate window.
func TestOpenOnEveryBroker(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		opts func(t *testing.T) boxoffice.Options
	}{
		{"kafka", func(*testing.T) boxoffice.Options { return boxoffice.Options{Broker: boxoffice.BrokerKafka} }},
		{"rabbitmq", func(t *testing.T) boxoffice.Options {
			url := os.Getenv("IDEM_TEST_AMQP_URL")
			if url == "" {
				t.Skip("IDEM_TEST_AMQP_URL not set; export IDEM_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ to run against RabbitMQ")
			}
			return boxoffice.Options{Broker: boxoffice.BrokerRabbitMQ, AMQPURL: url}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.opts(t)
			b := make([]byte, 4)
			_, _ = rand.Read(b)
			o.DataDir = t.TempDir()
			o.Config = boxoffice.Config{WebhookSecrets: []string{testSecret}, Subject: "idem-test." + hex.EncodeToString(b),
				PollInterval: 20 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond}
			sys, err := boxoffice.Open(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			defer sys.Close()
			if a, ok := sys.Config().Broker.(*boxoffice.AMQPBroker); ok {
				defer func() {
					_ = a.DeleteQueues(boxoffice.ConsumerNotification, boxoffice.ConsumerBilling, boxoffice.ConsumerSearch)
				}()
			}
			if err := sys.Start(ctx); err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(sys.Handler())
			defer srv.Close()
			placeOrder(t, srv.URL, "broker-1")
			deadline := time.Now().Add(60 * time.Second)
			var st boxoffice.Stats
			for ; time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if st, err = sys.Stats(ctx); err == nil && st.Invoices == 1 && st.EmailsSent == 1 && st.Notifications == 1 {
					break
				}
			}
			if st.Orders != 1 || st.Invoices != 1 || st.EmailsSent == 0 || st.Notifications != 1 {
				t.Fatalf("stats %+v (%v): want one order, invoiced and e-mailed once", st, err)
			}
			h, err := sys.Horizons(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(h.Streams) == 0 {
				t.Fatal("no broker horizon")
			}
			for _, s := range h.Streams {
				if s.MaxAge != boxoffice.DefaultStreamMaxAge || s.DuplicateWindow != 0 {
					t.Errorf("stream %+v: want max age %s and no duplicate window", s, boxoffice.DefaultStreamMaxAge)
				}
			}
		})
	}
}

// TestOpenRefusesMixedBrokers: a broker's address given for another broker,
// an unknown broker and RabbitMQ without its URL are invalid options.
func TestOpenRefusesMixedBrokers(t *testing.T) {
	for _, o := range []boxoffice.Options{
		{Broker: "pulsar"},
		{Broker: boxoffice.BrokerRabbitMQ},
		{Broker: boxoffice.BrokerKafka, AMQPURL: "amqp://guest:guest@127.0.0.1:5672/"},
		{Broker: boxoffice.BrokerNATS, Kafka: []string{"127.0.0.1:9092"}},
		{Broker: boxoffice.BrokerRabbitMQ, AMQPURL: "http://example.com/"},
	} {
		o.DataDir = t.TempDir()
		o.Config = boxoffice.Config{WebhookSecrets: []string{testSecret}}
		sys, err := boxoffice.Open(context.Background(), o)
		if err == nil {
			sys.Close()
		}
		if !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%+v: %v, want an invalid option", o, err)
		}
	}
}

// TestShortRetentionRefusedOnEveryBroker: the consumers' start-up check
// holds on Kafka and RabbitMQ: an inbox retention (1 day) shorter than the
// broker's horizon (the topic's retention.ms, the queues' x-message-ttl:
// 6 days) stops Run with consumer.ErrRetentionTooShort, since a
// redelivery could come after the inbox forgot the message.
func TestShortRetentionRefusedOnEveryBroker(t *testing.T) {
	ctx := context.Background()
	brokers := []boxoffice.Options{{Broker: boxoffice.BrokerKafka}}
	if url := os.Getenv("IDEM_TEST_AMQP_URL"); url != "" {
		brokers = append(brokers, boxoffice.Options{Broker: boxoffice.BrokerRabbitMQ, AMQPURL: url})
	} else {
		t.Log("IDEM_TEST_AMQP_URL not set: RabbitMQ not run; export IDEM_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/")
	}
	for _, o := range brokers {
		t.Run(o.Broker, func(t *testing.T) {
			b := make([]byte, 4)
			_, _ = rand.Read(b)
			o.DataDir = t.TempDir()
			o.Config = boxoffice.Config{Roles: []boxoffice.Role{boxoffice.RoleBilling}, Subject: "idem-test." + hex.EncodeToString(b),
				InboxRetention: 24 * time.Hour}
			sys, err := boxoffice.Open(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			defer sys.Close()
			if a, ok := sys.Config().Broker.(*boxoffice.AMQPBroker); ok {
				defer func() {
					_ = a.DeleteQueues(boxoffice.ConsumerNotification, boxoffice.ConsumerBilling, boxoffice.ConsumerSearch)
				}()
			}
			if err := sys.Run(ctx); !errors.Is(err, consumer.ErrRetentionTooShort) {
				t.Fatalf("Run: %v, want %v", err, consumer.ErrRetentionTooShort)
			}
		})
	}
}
