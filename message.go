package idem

import "time"

// Message is one delivery of a message, as the inbox and the consumer
// runtime see it, independent of the broker that carried it.
//
// ID is the producer-assigned, stable identity (CloudEvents source+id,
// Nats-Msg-Id, a Kafka header, AMQP message-id) or a business key derived
// from the payload ("create-invoice:<orderId>"). It must never be a
// transport-level id regenerated on redelivery, or dedup cannot work.
type Message struct {
	ID       string            // stable message identity; required, at most 255 bytes
	Subject  string            // subject / topic / queue it was delivered on
	Key      string            // ordering key (aggregate id), may be empty
	Headers  map[string]string // broker headers / CloudEvents attributes
	Payload  []byte            // message body
	Attempt  int               // delivery attempt, 1 for the first delivery
	Position string            // source position: stream sequence, partition/offset or delivery tag
	Time     time.Time         // when the producer created it, zero if unknown
}

// Fingerprint returns the payload's fingerprint: the SHA-256 of its
// canonical JSON ([CanonicalJSON]) when the payload is valid JSON, otherwise
// of its raw bytes, in separate domains (a raw fingerprint never equals a
// JSON one).
func (m Message) Fingerprint() Fingerprint { return payloadFingerprint(m.Payload) }

// MaxKeyLen is the longest key or message id idem stores.
const MaxKeyLen = 255
