package webhook_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/webhook"
)

// The example delivery published with the Svix and Standard Webhooks
// libraries (the vector of TestStandardKnownAnswer), sent the way Svix and
// the senders built on it send it: under the svix-* header names.
const (
	svixSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	svixID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	svixTS     = "1614265330"
	svixBody   = `{"test": 2432232314}`
	svixSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func svixHeaders() http.Header { return namedHeaders("svix-", svixID, svixTS, svixSig) }

// Item 14: svix-id, svix-timestamp and svix-signature are aliases of the
// Standard Webhooks headers; when both names of one header are present and
// disagree, the delivery is refused.
func TestSvixHeaderAliases(t *testing.T) {
	t.Parallel()
	s, err := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{svixSecret}})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1614265330, 0)
	verify := func(h http.Header) (webhook.Delivery, error) {
		return s.Verify(request(h, svixBody), []byte(svixBody), at)
	}
	d, err := verify(svixHeaders())
	if err != nil || d.ID != svixID || !d.Timestamp.Equal(at) {
		t.Fatalf("Svix delivery: %+v %v", d, err)
	}

	// Both names with the same values (a proxy that copies them): accepted.
	h := svixHeaders()
	h.Set("webhook-id", svixID)
	h.Set("webhook-timestamp", svixTS)
	h.Set("webhook-signature", svixSig)
	if _, err := verify(h); err != nil {
		t.Fatalf("both names, same values: %v", err)
	}

	// Both names, different values: refused whichever copy is genuine.
	for _, c := range []struct{ name, other string }{
		{"id", "msg_other"},
		{"timestamp", "1614265331"},
		{"signature", "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="},
	} {
		h := svixHeaders()
		h.Set("webhook-"+c.name, c.other)
		if _, err := verify(h); !errors.Is(err, webhook.ErrDuplicateHeader) {
			t.Errorf("svix-%s and webhook-%s disagree: %v", c.name, c.name, err)
		}
		// The same with the genuine values under webhook-* and the odd one
		// under svix-*.
		h = svixHeaders()
		h.Set("webhook-id", svixID)
		h.Set("webhook-timestamp", svixTS)
		h.Set("webhook-signature", svixSig)
		h.Set("svix-"+c.name, c.other)
		if _, err := verify(h); !errors.Is(err, webhook.ErrDuplicateHeader) {
			t.Errorf("webhook-%s and svix-%s disagree: %v", c.name, c.name, err)
		}
	}

	// A repeated svix-* header is a duplicate like a repeated webhook-* one.
	for _, name := range []string{"svix-id", "svix-timestamp", "svix-signature"} {
		h := svixHeaders()
		h.Add(name, h.Get(name))
		if _, err := verify(h); !errors.Is(err, webhook.ErrDuplicateHeader) {
			t.Errorf("two %s: %v", name, err)
		}
	}

	// The aliases do not weaken anything: a wrong body or a missing
	// signature still fails.
	if _, err := s.Verify(request(svixHeaders(), svixBody+" "), []byte(svixBody+" "), at); !errors.Is(err, webhook.ErrSignatureMismatch) {
		t.Errorf("tampered body under svix names: %v", err)
	}
	h = svixHeaders()
	h.Del("svix-signature")
	if _, err := verify(h); !errors.Is(err, webhook.ErrMissingSignature) {
		t.Errorf("no svix-signature: %v", err)
	}
}

// A Svix-named delivery through the whole Receiver: recorded once, its
// replay answered 200.
func TestReceiverAcceptsSvixHeaders(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		body := `{"type":"invoice.paid","invoice":"in_svix"}`
		signed := e.signed(t, "msg_svix", body)
		h := http.Header{}
		for _, name := range []string{"id", "timestamp", "signature"} {
			h.Set("svix-"+name, signed.Get("webhook-"+name))
		}
		for i, want := range []int{http.StatusAccepted, http.StatusOK} {
			if status, out := e.post(t, h, body); status != want || out["delivery_id"] != "msg_svix" {
				t.Fatalf("post %d: %d %v", i, status, out)
			}
		}
		if n := e.jobs(t, "msg_svix"); n != 1 {
			t.Fatalf("%d jobs", n)
		}
	})
}
