package consumer

import (
	"maps"

	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/origin"
)

// withOrigin returns headers with dv's broker coordinates added
// ([broker.Locator]: Kafka topic/partition/offset, JetStream stream
// sequence, AMQP queue and delivery tag), for a dead letter. headers is not
// modified; a delivery without coordinates leaves it as is.
func withOrigin(headers map[string]string, dv broker.Delivery) map[string]string {
	coords := origin.Of(dv)
	if len(coords) == 0 {
		return headers
	}
	out := maps.Clone(headers)
	if out == nil {
		out = make(map[string]string, len(coords))
	}
	maps.Copy(out, coords)
	return out
}
