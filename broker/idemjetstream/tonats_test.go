package idemjetstream

import (
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
)

func TestToNatsHeaders(t *testing.T) {
	at := time.Date(2026, 12, 6, 21, 0, 0, 123, time.FixedZone("x", 3600))
	m := idem.Message{ID: "e-1", Subject: "orders.created", Key: "k-1", Time: at, Payload: []byte(`{}`),
		Headers: map[string]string{"ce-type": "order.created", "ce-source": "shop", broker.HeaderRedrive: "3"}}
	nm := toNats(m)
	want := map[string]string{
		"ce-type": "order.created", "ce-source": "shop", broker.HeaderRedrive: "3",
		HeaderMsgID: "e-1#redrive-3", HeaderIdemID: "e-1", HeaderKey: "k-1",
		HeaderTime: at.UTC().Format(time.RFC3339Nano),
	}
	if len(nm.Header) != len(want) {
		t.Fatalf("headers %v, want %v", nm.Header, want)
	}
	for k, v := range want {
		if got := nm.Header[k]; len(got) != 1 || got[0] != v {
			t.Errorf("header %s = %q, want [%q]", k, got, v)
		}
	}
	// The values share one array: adding a value to one header must not
	// change another.
	nm.Header.Add("ce-type", "extra")
	for k, v := range want {
		if got := nm.Header[k]; got[0] != v {
			t.Errorf("after Add: header %s = %q, want %q first", k, got, v)
		}
	}
	if got := nm.Header["ce-type"]; len(got) != 2 || got[1] != "extra" {
		t.Errorf("ce-type after Add = %q", got)
	}
	if nm.Subject != m.Subject || string(nm.Data) != "{}" {
		t.Errorf("subject %q data %q", nm.Subject, nm.Data)
	}
}

func TestToNatsPlainMessage(t *testing.T) {
	nm := toNats(idem.Message{ID: "e-2", Subject: "s"})
	if len(nm.Header) != 1 || nm.Header.Get(HeaderMsgID) != "e-2" {
		t.Fatalf("headers %v, want only %s: e-2", nm.Header, HeaderMsgID)
	}
}

// BenchmarkToNats converts a relayed event's message (CloudEvents headers).
func BenchmarkToNats(b *testing.B) {
	m := idem.Message{ID: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Subject: "orders", Time: time.Now(), Payload: []byte(`{"n":1}`),
		Headers: map[string]string{"ce-specversion": "1.0", "ce-id": "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "ce-source": "shop",
			"ce-type": "order.created", "ce-time": "2026-12-06T21:00:00.123456Z", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"order_id": "o-1"}}
	b.ReportAllocs()
	for b.Loop() {
		_ = toNats(m)
	}
}
