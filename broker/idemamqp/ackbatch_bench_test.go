package idemamqp_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemamqp"
)

// BenchmarkSettle measures fetching and acknowledging messages from
// RabbitMQ in batches of 100, one Ack per delivery against one AckBatch
// per batch (a multiple ack). The messages are published before the timer
// starts; ns/op is per message. The first case to run leaves RabbitMQ
// warmer for the second, so compare them in separate processes, alternated:
//
//	go test -c -o /tmp/amqpbench ./broker/idemamqp/
//	IDEM_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ /tmp/amqpbench -test.run '^$' -test.bench 'Settle/ack_each$' -test.benchtime 40000x
//	IDEM_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ /tmp/amqpbench -test.run '^$' -test.bench 'Settle/ack_batch$' -test.benchtime 40000x
func BenchmarkSettle(b *testing.B) {
	url := os.Getenv("IDEM_TEST_AMQP_URL")
	if url == "" {
		b.Skip("IDEM_TEST_AMQP_URL not set")
	}
	for _, mode := range []string{"ack_each", "ack_batch"} {
		b.Run(mode, func(b *testing.B) {
			q := "idembench.settle." + unique()
			if err := idemamqp.DeclareQueue(url, idemamqp.QueueConfig{Name: q, Transient: true}); err != nil {
				b.Fatal(err)
			}
			defer idemamqp.DeleteQueue(url, q)
			pub, err := idemamqp.NewPublisher(idemamqp.PublisherConfig{URL: url})
			if err != nil {
				b.Fatal(err)
			}
			defer pub.Close()
			msgs := make([]idem.Message, 0, 500)
			for i := 0; i < b.N; {
				msgs = msgs[:0]
				for ; i < b.N && len(msgs) < cap(msgs); i++ {
					msgs = append(msgs, idem.Message{ID: "m-" + strconv.Itoa(i), Subject: q, Payload: []byte("x")})
				}
				if err := pub.Publish(b.Context(), msgs...); err != nil {
					b.Fatal(err)
				}
			}
			s, err := idemamqp.NewSubscriber(idemamqp.SubscriberConfig{URL: url, Queue: q, Prefetch: 200})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.ResetTimer()
			for n := 0; n < b.N; {
				ds, err := s.Fetch(b.Context(), 100, 5*time.Second)
				if err != nil || len(ds) == 0 {
					b.Fatalf("fetch after %d of %d: %v", n, b.N, err)
				}
				n += len(ds)
				if mode == "ack_batch" {
					if err := s.AckBatch(b.Context(), ds); err != nil {
						b.Fatal(err)
					}
					continue
				}
				for _, d := range ds {
					if err := d.Ack(b.Context()); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			var _ broker.BatchAcker = s
		})
	}
}
