// Package broker is idem's seam to message brokers: a Publisher that returns
// only after the broker durably accepted a message, and a pull Subscriber
// whose deliveries are acknowledged explicitly.
//
//	nc, js, err := idemjetstream.Dial("nats://127.0.0.1:4222")
//	pub, err := idemjetstream.NewPublisher(js, idemjetstream.PublisherConfig{}) // a broker.Publisher
//	relay, err := outbox.NewRelay(d, pub, outbox.RelayConfig{})                 // publishes committed events
//	sub, err := idemjetstream.NewSubscriber(ctx, js, idemjetstream.SubscriberConfig{
//		Stream: "ORDERS", Durable: "billing", // a broker.Subscriber: one durable pull consumer
//	})
//	c, err := consumer.New(d, ib, sub, consumer.Config[pgx.Tx]{Name: "billing", Handler: apply})
//	err = idem.Run(ctx, relay, c) // acks after commit
//
//	// Kafka: idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: seeds}),
//	// idemkafka.NewSubscriber(idemkafka.SubscriberConfig{Brokers: seeds, Group: "billing", Topics: …});
//	// RabbitMQ: idemamqp.NewPublisher / NewSubscriber; tests: memory.New(memory.Config{})
//
// The message id (idem.Message.ID) travels as the broker's own dedup id
// (JetStream Nats-Msg-Id, a Kafka header, AMQP message-id) and comes back
// unchanged on every redelivery, so consumers can dedup on it.
//
// The adapters are modules of their own, so a service pulls in only its
// broker's client: github.com/idemkit/idem/broker/idemjetstream,
// broker/idemkafka and broker/idemamqp; broker/memory, an in-process broker
// for tests, is in the core. All pass the shared conformance suite in
// broker/brokertest.
package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
)

// Publisher publishes messages.
type Publisher interface {
	// Publish sends msgs in order and returns only after the broker has
	// durably accepted every one of them (JetStream PubAck, Kafka produce
	// ack, AMQP publisher confirm). On error some messages may have been
	// accepted: the caller retries them all, and the broker's dedup on the
	// message id (or the consumer's inbox) absorbs the duplicates.
	// msg.Subject is the subject / topic / routing key; msg.ID is required.
	Publish(ctx context.Context, msgs ...idem.Message) error
	// Close releases the publisher's resources.
	Close() error
}

// Delivery is one delivery of a message. Exactly one of Ack, Nak or Term
// should be called; until then the broker redelivers the message after its
// ack wait.
type Delivery interface {
	// Message returns the message: stable ID, subject, key, headers,
	// payload, delivery attempt (1-based) and source position.
	Message() idem.Message
	// Ack acknowledges the message: it will not be delivered again. Call it
	// only after the transaction that recorded the message's effect has
	// committed.
	Ack(ctx context.Context) error
	// Nak asks for redelivery after delay (0: as soon as possible).
	Nak(ctx context.Context, delay time.Duration) error
	// Term stops redelivery for good (the message was dead-lettered).
	Term(ctx context.Context) error
}

// BatchAcker is implemented by subscribers that acknowledge many
// deliveries at once (JetStream: the acks are sent together, the last a
// double ack, one round trip; Kafka: one commit request for the batch;
// AMQP: one multiple ack for the deliveries below every other unsettled
// one). The consumer runtime acks a batch's committed deliveries with it
// instead of one Ack (and one confirmation) per delivery.
//
// AckBatch acks ds, deliveries this subscriber fetched. On a nil error
// the broker has every ack (AMQP, which does not confirm acks: every ack
// was written to the channel). On a [*BatchAckError] it has the acks of
// the deliveries whose entry is nil (see [BatchAcked]); on any other
// error every ack is in doubt. A delivery whose ack did not reach the
// broker is redelivered, and the inbox answers the redelivery as a
// duplicate, so nothing runs twice. An ack done is one the broker will not
// redeliver for (Kafka: the record is settled, and committed with the
// commit that passes the last unsettled record before it in its
// partition; AMQP: unless the connection is lost before the broker reads
// it).
type BatchAcker interface {
	AckBatch(ctx context.Context, ds []Delivery) error
}

// BatchAckError is the error of an AckBatch that knows which acks the
// broker has: Errs[i] is nil when the ack of the batch's delivery i is
// done, the reason it is not otherwise (a Kafka partition revoked while
// the batch ran fails only that partition's deliveries).
type BatchAckError struct {
	Errs []error // one per delivery, in the batch's order
}

// Error joins the failed acks' errors.
func (e *BatchAckError) Error() string {
	n := 0
	for _, err := range e.Errs {
		if err != nil {
			n++
		}
	}
	return fmt.Sprintf("%d of %d acks failed: %v", n, len(e.Errs), errors.Join(e.Errs...))
}

// Unwrap returns the failed acks' errors, for [errors.Is] and [errors.As].
func (e *BatchAckError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// BatchAcked reports whether an AckBatch that returned err acked the
// delivery at index i of its batch: always when err is nil, as its entry
// says when err is a [*BatchAckError], never on any other error.
func BatchAcked(err error, i int) bool {
	if err == nil {
		return true
	}
	var be *BatchAckError
	if errors.As(err, &be) && i >= 0 && i < len(be.Errs) {
		return be.Errs[i] == nil
	}
	return false
}

// NewBatchAckError returns nil when every entry of errs is nil, and a
// [*BatchAckError] holding errs otherwise: what an AckBatch that tracked
// each delivery's ack returns.
func NewBatchAckError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return &BatchAckError{Errs: errs}
		}
	}
	return nil
}

// Subscriber pulls deliveries from one subscription (a durable JetStream
// consumer, a Kafka consumer group, an AMQP queue).
type Subscriber interface {
	// Fetch waits until at least one delivery is available, maxWait passes
	// or ctx is done, and returns up to max deliveries (possibly none, with
	// a nil error, when maxWait passed).
	Fetch(ctx context.Context, max int, maxWait time.Duration) ([]Delivery, error)
	// Close stops the subscription; unacknowledged deliveries are
	// redelivered later.
	Close() error
}

// DeliveryLimiter is implemented by subscribers whose broker stops
// redelivering a message after a number of deliveries (JetStream's
// MaxDeliver). The consumer runtime refuses a limit below its MaxAttempts:
// a message failing that many times would be neither processed nor
// dead-lettered.
type DeliveryLimiter interface {
	// MaxDeliveries returns the deliveries after which the broker gives a
	// message up; zero or negative means no limit.
	MaxDeliveries() int
}

// Pauser is implemented by subscribers that can stop fetching from the
// broker for a while (backpressure): Kafka pauses the fetches of its
// topics' partitions (PauseFetchTopics), JetStream stops pulling, AMQP
// cancels its consumer so the broker stops pushing. Deliveries already
// handed out can still be settled while paused, and no message is lost:
// what was not fetched waits in the broker. Both calls are idempotent.
type Pauser interface {
	// Pause stops fetching new messages until Resume.
	Pause(ctx context.Context) error
	// Resume fetches again after Pause.
	Resume(ctx context.Context) error
}
