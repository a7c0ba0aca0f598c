package broker

import "strings"

// OriginPrefix begins the name of every origin header: a delivery's
// coordinates in its broker, which the consumer runtime records in the
// headers of a dead letter (and which are dropped again when the letter is
// redriven, since the republished message gets new ones).
const OriginPrefix = "idem-origin-"

// Origin header names, by broker. Each adapter reports the ones that
// locate a delivery in its own terms.
const (
	// Kafka: the record's topic, partition and offset.
	OriginTopic     = OriginPrefix + "topic"
	OriginPartition = OriginPrefix + "partition"
	OriginOffset    = OriginPrefix + "offset"
	// JetStream: the stream, its sequence number of the message, the
	// durable consumer and the subject. OriginSubject is also the memory
	// broker's subject.
	OriginStream    = OriginPrefix + "stream"
	OriginStreamSeq = OriginPrefix + "stream-seq"
	OriginConsumer  = OriginPrefix + "consumer"
	OriginSubject   = OriginPrefix + "subject"
	// AMQP: the queue consumed, the delivery tag (per channel), and the
	// exchange and routing key the message was published with.
	OriginQueue       = OriginPrefix + "queue"
	OriginDeliveryTag = OriginPrefix + "delivery-tag"
	OriginExchange    = OriginPrefix + "exchange"
	OriginRoutingKey  = OriginPrefix + "routing-key"
	// Memory broker: the message's sequence number in the broker.
	OriginSeq = OriginPrefix + "seq"
)

// Locator is an optional interface of a [Delivery] that reports its
// coordinates in the broker.
type Locator interface {
	// Origin returns the delivery's coordinates as origin header name
	// (OriginTopic, …) → value. The caller may modify the map.
	Origin() map[string]string
}

// OriginOf returns dv's coordinates if it implements [Locator], else nil.
func OriginOf(dv Delivery) map[string]string {
	if l, ok := dv.(Locator); ok {
		return l.Origin()
	}
	return nil
}

// IsOriginHeader reports whether name is an origin header (it begins with
// [OriginPrefix]).
func IsOriginHeader(name string) bool { return strings.HasPrefix(name, OriginPrefix) }
