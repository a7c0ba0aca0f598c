package idemjetstream_test

import (
	"fmt"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/broker/idemjetstream/embedded"
)

// BenchmarkPublishBatch100 measures publishing to the embedded server with
// PubAcks awaited, in batches of 100 (as the outbox relay does); the
// reported ns/op is per message.
func BenchmarkPublishBatch100(b *testing.B) {
	srv, err := embedded.Start(embedded.Config{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	nc, j, err := idemjetstream.Dial(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	_, subject := newStream(b, j)
	pub, _ := idemjetstream.NewPublisher(j, idemjetstream.PublisherConfig{})
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
