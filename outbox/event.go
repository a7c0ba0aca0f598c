package outbox

import (
	"fmt"
	"maps"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/obs"
)

// CloudEvents attributes travel as broker headers (CloudEvents binary
// content mode) under these names.
const (
	HeaderID          = "ce-id"
	HeaderSource      = "ce-source"
	HeaderType        = "ce-type"
	HeaderSubject     = "ce-subject"
	HeaderTime        = "ce-time"
	HeaderSpecVersion = "ce-specversion"
	HeaderContentType = "content-type"
)

// Event is one outbox event: CloudEvents attributes, a broker destination,
// an ordering key, headers and a payload.
//
// Identity: consumers dedup on Source + ID (CloudEvents). The broker, however,
// dedups on the message id alone (JetStream Nats-Msg-Id, AMQP message-id), and
// the relay sends ID as that id. ID must therefore be unique on its own, not
// only per source: the default UUIDv7 is globally unique; a caller-chosen ID
// should embed its source (e.g. "orders:order-42-created").
type Event struct {
	// ID is the CloudEvents id and the broker message id. Defaults to a
	// UUIDv7 assigned by Enqueue. At most 255 bytes.
	ID string
	// Source is the CloudEvents source (a URI-reference naming the
	// producer). Defaults to Config.Source.
	Source string
	// Type is the CloudEvents type, e.g. "com.example.order.created".
	// Required.
	Type string
	// Subject is the CloudEvents subject (what the event is about), optional.
	Subject string
	// Time is the CloudEvents time. Defaults to the enqueue time.
	Time time.Time
	// DataContentType is the CloudEvents datacontenttype of Payload, e.g.
	// "application/json". Optional.
	DataContentType string
	// Topic is the broker subject / topic / routing key the event is
	// published to. Required.
	Topic string
	// Key is the ordering key (aggregate id). Events with the same
	// non-empty Key are published in enqueue order; an empty Key means no
	// ordering constraint. At most [MaxOrderingKeyLen] bytes.
	Key string
	// Headers are extra broker headers. The CloudEvents headers (ce-*,
	// content-type) take precedence over entries with the same name.
	Headers map[string]string
	// Payload is the event data.
	Payload []byte

	// Seq is the outbox row's sequence number, set by Enqueue and on
	// events handed to relay hooks. It orders events of one Key.
	Seq int64
	// Attempts counts failed publish attempts so far (relay hooks only).
	Attempts int

	// TraceParent and TraceState are the W3C trace context stored with the
	// row (migration 0007): Enqueue sets them from the idem.outbox.enqueue
	// span it opens, unless the caller set TraceParent; empty when no span
	// was active. The relay publishes the event in an idem.relay.publish
	// span that is a child of this context and injects that span's context
	// into the message's traceparent/tracestate headers.
	TraceParent, TraceState string
}

// HeaderCausation is the broker header naming the message whose handling
// enqueued the event: Enqueue sets it from the context of a handler run by
// idem's consumer runtime (the consumed message's id), unless the event's
// Headers already hold it.
const HeaderCausation = obs.HeaderCausation

// Message maps e to the broker message the relay publishes: ID = e.ID (the
// broker dedup id), Subject = e.Topic, Key = e.Key, the CloudEvents
// attributes as headers (ce-id, ce-source, ce-type, ce-subject, ce-time,
// ce-specversion, content-type) merged over e.Headers, and the stored
// trace context (traceparent, tracestate) when there is one.
func (e Event) Message() idem.Message {
	h := make(map[string]string, len(e.Headers)+9)
	maps.Copy(h, e.Headers)
	if e.TraceParent != "" {
		h[obs.HeaderTraceparent] = e.TraceParent
		if e.TraceState != "" {
			h[obs.HeaderTracestate] = e.TraceState
		}
	}
	h[HeaderSpecVersion] = "1.0"
	h[HeaderID] = e.ID
	h[HeaderSource] = e.Source
	h[HeaderType] = e.Type
	if e.Subject != "" {
		h[HeaderSubject] = e.Subject
	}
	if !e.Time.IsZero() {
		h[HeaderTime] = e.Time.UTC().Format(time.RFC3339Nano)
	}
	if e.DataContentType != "" {
		h[HeaderContentType] = e.DataContentType
	}
	return idem.Message{
		ID:      e.ID,
		Subject: e.Topic,
		Key:     e.Key,
		Headers: h,
		Payload: e.Payload,
		Time:    e.Time,
	}
}

// FromMessage reads the CloudEvents attributes back from a delivered
// message (the consumer side of [Event.Message]). The message id is used
// when the ce-id header is missing. Errors wrap [idem.ErrInvalidInput].
func FromMessage(m idem.Message) (Event, error) {
	e := Event{
		ID:              m.Headers[HeaderID],
		Source:          m.Headers[HeaderSource],
		Type:            m.Headers[HeaderType],
		Subject:         m.Headers[HeaderSubject],
		DataContentType: m.Headers[HeaderContentType],
		Topic:           m.Subject,
		Key:             m.Key,
		Payload:         m.Payload,
		Time:            m.Time,
	}
	if e.ID == "" {
		e.ID = m.ID
	}
	if s := m.Headers[HeaderTime]; s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return e, fmt.Errorf("%w: bad %s header %q", idem.ErrInvalidInput, HeaderTime, s)
		}
		e.Time = t
	}
	if e.ID == "" || e.Source == "" || e.Type == "" {
		return e, fmt.Errorf("%w: message %q lacks CloudEvents id, source or type", idem.ErrInvalidInput, m.ID)
	}
	e.Headers = make(map[string]string, len(m.Headers))
	for k, v := range m.Headers {
		switch k {
		case HeaderID, HeaderSource, HeaderType, HeaderSubject, HeaderTime, HeaderSpecVersion, HeaderContentType:
		default:
			e.Headers[k] = v
		}
	}
	return e, nil
}
