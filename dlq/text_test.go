package dlq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/internal/errtext/errtexttest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// A message whose text fields hold bytes a text column refuses (invalid
// UTF-8, NUL: an AMQP routing key or a Kafka record key can carry any
// bytes) is still parked, on every dialect: a letter that cannot be stored
// would be retried forever. The payload is kept byte for byte; the text
// fields are stored with those bytes replaced by U+FFFD.
func TestParkUnstorableText(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testParkUnstorableText(t, e.D) })
}

func testParkUnstorableText[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	s, err := dlq.New(d, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte("\xff\x00raw")
	msg := idem.Message{ID: "m-1", Subject: "orders.\xff", Key: "k\x00\xfe", Position: "7\x00",
		Headers: map[string]string{"h\xff": "v\x00\xff"}, Payload: payload, Attempt: 1}
	id, err := s.Park(ctx, dlq.FromMessage("billing", msg, idem.Permanent(errors.New("bad \xff byte\x00"))))
	if err != nil {
		t.Fatalf("park: %v", err)
	}
	// Parked again (a redelivery): the same letter.
	if again, err := s.Park(ctx, dlq.FromMessage("billing", msg, idem.Permanent(errors.New("bad \xff byte\x00")))); err != nil || again != id {
		t.Fatalf("park again: letter %d, %v; want %d", again, err, id)
	}
	l, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if string(l.Payload) != string(payload) {
		t.Errorf("payload %q, want %q byte for byte", l.Payload, payload)
	}
	for name, v := range map[string]string{"source": l.Source, "key": l.Key, "position": l.Position, "error": l.Error} {
		if !utf8.ValidString(v) || strings.Contains(v, "\x00") || !strings.Contains(v, "\uFFFD") {
			t.Errorf("%s = %q, want valid UTF-8 with U+FFFD in place of the bad bytes", name, v)
		}
	}
	if l.Source != "orders.\uFFFD" || l.Key != "k\uFFFD\uFFFD" || l.Attempts != 2 {
		t.Errorf("letter %+v", l)
	}
	for k, v := range l.Headers {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			t.Errorf("header %q: %q, want valid UTF-8", k, v)
		}
	}
}

// A letter's error text is stored cleaned and capped: a rune across byte
// 2,000 kept whole, NUL removed, invalid UTF-8 replaced, at most 4 KiB, on
// every dialect. Before, it was stored whole (a handler error quoting a
// megabyte response body made a megabyte letter) with NUL as U+FFFD.
func TestParkErrorTextCapped(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testParkErrorTextCapped(t, e.D) })
}

func testParkErrorTextCapped[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	s, err := dlq.New(d, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	text := errtexttest.Text("") + "\xff" + strings.Repeat("y", 1<<20)
	id, err := s.Park(ctx, dlq.Letter{Consumer: "billing", MessageID: "m-1", Payload: []byte("{}"), Error: text, ErrorClass: "transient"})
	if err != nil {
		t.Fatalf("park: %v", err)
	}
	l, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	errtexttest.Check(t, "letter's error", l.Error, text)
}
