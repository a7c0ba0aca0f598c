package retrytopic_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer/retrytopic"
	"github.com/idemkit/idem/internal/errtext"
	"github.com/idemkit/idem/internal/errtext/errtexttest"
)

type capturePublisher struct {
	mu   sync.Mutex
	msgs []idem.Message
}

func (p *capturePublisher) Publish(_ context.Context, msgs ...idem.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, msgs...)
	return nil
}

func (p *capturePublisher) Close() error { return nil }

// The error text put in the idem-error-message header is cleaned like
// every stored error text (it ends up as a dead letter's error): invalid
// UTF-8 replaced, NUL removed, cut on a rune boundary. Before, a short text
// kept its NUL and invalid bytes.
func TestErrorMessageHeaderIsClean(t *testing.T) {
	t.Parallel()
	pub := &capturePublisher{}
	r, err := retrytopic.New(retrytopic.Config{Topic: "orders", Publisher: pub})
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"bad \xff byte \x00 here", errtexttest.Text("")} {
		cause := errors.New(text)
		if err := r.Reroute(context.Background(), idem.Message{ID: "m-1", Subject: "orders", Payload: []byte("{}"), Attempt: 1}, cause); err != nil {
			t.Fatal(err)
		}
		got := pub.msgs[len(pub.msgs)-1].Headers[retrytopic.HeaderErrorMessage]
		if want := errtext.Cut(text, retrytopic.MaxErrorMessage); got != want {
			t.Errorf("header %q, want %q", got, want)
		}
		if !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 || len(got) > retrytopic.MaxErrorMessage {
			t.Errorf("header %q: not clean", got)
		}
	}
}
