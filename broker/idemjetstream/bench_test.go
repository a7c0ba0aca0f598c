package idemjetstream_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/broker/idemjetstream/embedded"
	"github.com/idemkit/idem/outbox"
)

// embeddedPublisher starts an embedded server (shut down with b) and
// returns a publisher on it and a subject of a fresh stream.
func embeddedPublisher(b *testing.B) (*idemjetstream.Publisher, string) {
	srv, err := embedded.Start(embedded.Config{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Shutdown)
	nc, j, err := idemjetstream.Dial(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	_, subject := newStream(b, j)
	pub, err := idemjetstream.NewPublisher(j, idemjetstream.PublisherConfig{})
	if err != nil {
		b.Fatal(err)
	}
	return pub, subject
}

// BenchmarkPublishBatch100 measures publishing to the embedded server with
// PubAcks awaited, in batches of 100 (as the outbox relay does); the
// reported ns/op is per message.
func BenchmarkPublishBatch100(b *testing.B) {
	pub, subject := embeddedPublisher(b)
	batch := make([]idem.Message, 100)
	payload := make([]byte, 256)
	b.ResetTimer()
	for i := 0; i < b.N; i += len(batch) {
		for k := range batch {
			batch[k] = idem.Message{ID: fmt.Sprintf("m-%d-%d", i, k), Subject: subject, Key: fmt.Sprintf("key-%d", k%20), Payload: payload}
		}
		if err := pub.Publish(b.Context(), batch...); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublishCloudEvents publishes to the embedded server in batches
// of 512 (as the relay does), bare messages against the messages the
// outbox relay publishes (outbox.Event.Message: the CloudEvents headers);
// ns/op is per message and covers the client and the server, both in
// this process. Compare the two to see what the headers cost the broker:
//
//	go test -run '^$' -bench PublishCloudEvents -count 5 ./broker/idemjetstream/
func BenchmarkPublishCloudEvents(b *testing.B) {
	payload := []byte(`{"order_id":"o-123456","amount":1299,"currency":"EUR","items":[{"sku":"A-1","qty":2}]}`)
	for _, ce := range []bool{false, true} {
		name := map[bool]string{false: "bare", true: "cloudevents"}[ce]
		b.Run(name, func(b *testing.B) {
			pub, subject := embeddedPublisher(b)
			batch := make([]idem.Message, 0, 512)
			n := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += cap(batch) {
				batch = batch[:0]
				for range cap(batch) {
					n++
					id := fmt.Sprintf("0193a1b2-c3d4-7e5f-8a9b-%012d", n) // a UUID's length
					if !ce {
						batch = append(batch, idem.Message{ID: id, Subject: subject, Payload: payload})
						continue
					}
					batch = append(batch, outbox.Event{ID: id, Source: "idem", Type: "bench.order.created", Topic: subject,
						Payload: payload, Time: time.Now()}.Message())
				}
				if err := pub.Publish(b.Context(), batch...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
