package bench

import (
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/idemkit/idem/store"
)

// A replicated outbox row (pgoutput's text format) becomes the event the
// relay would have claimed; a payload that is not bytea's hex form is an
// error, not an empty payload.
func TestEventOfTuple(t *testing.T) {
	names := []string{"seq", "source", "event_id", "type", "subject", "ce_subject", "time", "datacontenttype",
		"ordering_key", "headers", "payload", "traceparent", "tracestate"}
	cols := map[string]int{}
	for i, n := range names {
		cols[n] = i
	}
	tuple := func(payload string) *pglogrepl.TupleData {
		vals := []string{"7", "/orders", "ev-1", "order.created", "orders.created", "order-1", "1764547200000000", "application/json",
			"k1", `{"order_id":"1"}`, payload, "00-abc-def-01", ""}
		td := &pglogrepl.TupleData{ColumnNum: uint16(len(vals))}
		for _, v := range vals {
			td.Columns = append(td.Columns, &pglogrepl.TupleDataColumn{DataType: 't', Length: uint32(len(v)), Data: []byte(v)})
		}
		return td
	}
	e, err := eventOfTuple(cols, tuple(`\x7b7d`))
	if err != nil {
		t.Fatal(err)
	}
	if e.Source != "/orders" || e.ID != "ev-1" || e.Type != "order.created" || e.Topic != "orders.created" || e.Subject != "order-1" ||
		e.DataContentType != "application/json" || e.Key != "k1" || e.TraceParent != "00-abc-def-01" || string(e.Payload) != "{}" ||
		e.Headers["order_id"] != "1" || !e.Time.Equal(store.FromMicros(1764547200000000)) {
		t.Fatalf("event %+v", e)
	}
	if m := e.Message(); m.ID != "ev-1" || m.Subject != "orders.created" || m.Key != "k1" {
		t.Fatalf("message %+v", m)
	}
	if _, err := eventOfTuple(cols, tuple("{}")); err == nil {
		t.Fatal("a payload not in bytea hex form was accepted")
	}
	delete(cols, "payload")
	if _, err := eventOfTuple(cols, tuple(`\x00`)); err == nil {
		t.Fatal("a row without a payload column was accepted")
	}
}
