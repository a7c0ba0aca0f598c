// Package origin names the origin headers: a delivery's coordinates in its
// broker, which the consumer runtime records in the headers of a dead letter
// (and which are dropped again when the letter is redriven, since the
// republished message gets new ones). Adapters report them through
// [broker.Locator].
package origin

import (
	"strings"

	"github.com/idemkit/idem/broker"
)

// Prefix begins the name of every origin header.
const Prefix = "idem-origin-"

// Origin header names, by broker. Each adapter reports the ones that
// locate a delivery in its own terms.
const (
	// Kafka: the record's topic, partition and offset.
	Topic     = Prefix + "topic"
	Partition = Prefix + "partition"
	Offset    = Prefix + "offset"
	// JetStream: the stream, its sequence number of the message, the
	// durable consumer and the subject. Subject is also the memory
	// broker's subject.
	Stream    = Prefix + "stream"
	StreamSeq = Prefix + "stream-seq"
	Consumer  = Prefix + "consumer"
	Subject   = Prefix + "subject"
	// AMQP: the queue consumed, the delivery tag (per channel), and the
	// exchange and routing key the message was published with.
	Queue       = Prefix + "queue"
	DeliveryTag = Prefix + "delivery-tag"
	Exchange    = Prefix + "exchange"
	RoutingKey  = Prefix + "routing-key"
	// Memory broker: the message's sequence number in the broker.
	Seq = Prefix + "seq"
)

// Of returns dv's coordinates if it implements [broker.Locator], else nil.
func Of(dv broker.Delivery) map[string]string {
	if l, ok := dv.(broker.Locator); ok {
		return l.Origin()
	}
	return nil
}

// IsHeader reports whether name is an origin header (it begins with
// [Prefix]).
func IsHeader(name string) bool { return strings.HasPrefix(name, Prefix) }
