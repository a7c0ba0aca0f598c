package dlq_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/internal/checks"
)

// A message without a usable id gets a letter id made of its broker
// coordinates, always a valid id, the same for a redelivery and different
// for another position; a message with an id keeps it.
func TestFromMessageWithoutID(t *testing.T) {
	t.Parallel()
	cause := errors.New("boom")
	if l := dlq.FromMessage("c", idem.Message{ID: "m-1", Subject: "s", Position: "3"}, cause); l.MessageID != "m-1" {
		t.Errorf("message with an id: letter id %q, want m-1", l.MessageID)
	}
	if l := dlq.FromMessage("c", idem.Message{Subject: "orders", Position: "42", Attempt: 3}, cause); l.MessageID != "no-id:orders@42" {
		t.Errorf("message without an id: letter id %q, want no-id:orders@42", l.MessageID)
	}
	for name, msg := range map[string]idem.Message{
		"long subject":   {Subject: strings.Repeat("x", 300), Position: "1"},
		"control chars":  {Subject: "a\x1b]0;pwn\x07", Position: "1"},
		"invalid id":     {ID: "bad\x00id", Subject: "s", Position: "1"},
		"too long id":    {ID: strings.Repeat("i", 256), Subject: "s", Position: "1"},
		"no coordinates": {},
	} {
		id := dlq.FromMessage("c", msg, cause).MessageID
		if err := checks.ID(id); err != nil || !strings.HasPrefix(id, dlq.NoIDPrefix) {
			t.Errorf("%s: letter id %q (%v), want a valid %s… id", name, id, err, dlq.NoIDPrefix)
		}
		next := msg
		next.Position = "2"
		if id == dlq.SyntheticID(next) {
			t.Errorf("%s: positions 1 and 2 share the letter id %q", name, id)
		}
		if again := dlq.SyntheticID(msg); again != id {
			t.Errorf("%s: a redelivery gets %q, first delivery %q", name, again, id)
		}
	}
}
