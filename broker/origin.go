package broker

// Locator is an optional interface of a [Delivery] that reports its
// coordinates in the broker. The consumer runtime records them in a dead
// letter's headers, under names that begin with "idem-origin-": Kafka's
// idem-origin-topic, idem-origin-partition and idem-origin-offset;
// JetStream's idem-origin-stream, idem-origin-stream-seq,
// idem-origin-consumer and idem-origin-subject; AMQP's idem-origin-queue,
// idem-origin-delivery-tag, idem-origin-exchange and
// idem-origin-routing-key; the memory broker's idem-origin-subject and
// idem-origin-seq. A redriven letter drops them.
type Locator interface {
	// Origin returns the delivery's coordinates as origin header name
	// (idem-origin-topic, …) → value. The caller may modify the map.
	Origin() map[string]string
}
