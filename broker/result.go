package broker

import (
	"context"
	"errors"

	"github.com/idemkit/idem"
)

// PublishResult is what the broker reported for one message it accepted.
type PublishResult struct {
	ID       string // the message id that was published
	Position string // where the broker stored it (stream sequence, partition/offset); empty if unknown
	// Duplicate reports that the broker recognised the id as already
	// published inside its duplicate window (JetStream Nats-Msg-Id) and did
	// not store the message again. Brokers without id dedup never set it.
	Duplicate bool
}

// ResultPublisher is an optional interface of publishers that report, per
// message, what the broker did with it. The outbox relay and the drills use
// it to observe broker-side dedup; plain Publish is enough to publish.
//
// PublishResults has Publish's semantics (returns only after every message
// was durably accepted); on error it returns the results of the messages
// accepted so far, in order, and the error.
type ResultPublisher interface {
	Publisher
	PublishResults(ctx context.Context, msgs ...idem.Message) ([]PublishResult, error)
}

// ErrUnavailable reports that the broker could not be reached or refused
// the operation for now (outage, connection closed). It is retryable: retry
// the same messages later; their ids make the retry safe.
var ErrUnavailable = errors.New("broker: unavailable")

// ErrNoRoute reports a message that the broker is reachable for but that
// nothing on it takes: no JetStream stream covers its subject, no Kafka
// topic has its name, no RabbitMQ queue is bound to its routing key. It is
// a configuration mistake, not an outage: the adapters name the subject and
// mark the error permanent ([idem.Permanent]), so a relay parks the event
// with that reason instead of pausing as if the broker were down. Once the
// stream, topic or queue exists, retry the parked events.
var ErrNoRoute = errors.New("broker: no stream, topic or queue takes the subject")

// ErrClosed reports an operation on a closed publisher or subscriber.
var ErrClosed = errors.New("broker: closed")

// HeaderRedrive marks a deliberate republish of a message that was already
// published once, such as a dead-letter redrive; its value names the
// republish (the dead letter's id). Brokers that drop a repeated message id
// inside a duplicate window (JetStream's Nats-Msg-Id) dedup such a message
// under [DedupID] instead, so the redrive is delivered, while consumers
// still receive the original message id and dedup on it in their inbox.
const HeaderRedrive = "Idem-Redrive"

// DedupID is the id a broker with id-based dedup should use for m: m.ID,
// or m.ID with the HeaderRedrive value appended for a deliberate republish.
func DedupID(m idem.Message) string {
	if r := m.Headers[HeaderRedrive]; r != "" {
		return m.ID + "#redrive-" + r
	}
	return m.ID
}
