package webhook_test

import (
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/webhook"
)

// The parsers must never panic, must fail only with ErrMalformedHeader, and
// what they accept must have the shape of a SHA-256 MAC.

func FuzzParseStandardSignatures(f *testing.F) {
	for _, s := range []string{"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "v1,a v1,b", "v1a,x v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "", " ", ",", "v1,,", "v1,====", "\x00v1,\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		sigs, err := webhook.ParseStandardSignatures(h)
		if err != nil {
			if !errors.Is(err, webhook.ErrMalformedHeader) {
				t.Fatalf("error class: %v", err)
			}
			return
		}
		if len(sigs) == 0 || len(sigs) > strings.Count(h, "v1,") {
			t.Fatalf("%q: %d signatures", h, len(sigs))
		}
		for _, s := range sigs {
			if len(s) != sha256.Size {
				t.Fatalf("%q: signature of %d bytes", h, len(s))
			}
		}
	})
}

func FuzzParseStripeSignature(f *testing.F) {
	v1 := "v1=" + strings.Repeat("ab", 32)
	for _, s := range []string{"t=1492774577," + v1, "t=1," + v1 + "," + v1, "t=1,t=2," + v1, v1 + ",t=9", "t=,v1=", "=,=", "t=1e3," + v1, "t=1 ,  " + v1, ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		ts, sigs, err := webhook.ParseStripeSignature(h)
		if err != nil {
			if !errors.Is(err, webhook.ErrMalformedHeader) {
				t.Fatalf("error class: %v", err)
			}
			return
		}
		if ts == "" || strings.Trim(ts, "0123456789") != "" || len(sigs) == 0 {
			t.Fatalf("%q: accepted t=%q with %d signatures", h, ts, len(sigs))
		}
		for _, s := range sigs {
			if len(s) != sha256.Size {
				t.Fatalf("%q: signature of %d bytes", h, len(s))
			}
		}
	})
}

func FuzzParseGitHubSignature(f *testing.F) {
	for _, s := range []string{"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", "sha256=", "sha1=ab", "", "sha256=" + strings.Repeat("G", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		sig, err := webhook.ParseGitHubSignature(h)
		if err != nil {
			if !errors.Is(err, webhook.ErrMalformedHeader) {
				t.Fatalf("error class: %v", err)
			}
			return
		}
		if len(sig) != sha256.Size || !strings.HasPrefix(h, "sha256=") {
			t.Fatalf("%q accepted", h)
		}
	})
}

// Whatever headers an attacker sends, a verifier without the secret's MAC
// never accepts, and never panics.
func FuzzVerifyForged(f *testing.F) {
	f.Add("msg_1", "1750000000", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "t=1750000000,v1="+strings.Repeat("0", 64), "sha256="+strings.Repeat("0", 64), []byte(`{"id":"evt"}`))
	std, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}})
	st, _ := webhook.NewStripe(webhook.StripeConfig{Secrets: []string{"whsec_x"}})
	gh, _ := webhook.NewGitHub("secret")
	now := time.Unix(1_750_000_000, 0)
	f.Fuzz(func(t *testing.T, id, ts, stdSig, stripeSig, ghSig string, body []byte) {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", stdSig)
		h.Set("Stripe-Signature", stripeSig)
		h.Set("X-Hub-Signature-256", ghSig)
		h.Set("X-GitHub-Delivery", id)
		r := request(h, string(body))
		for _, v := range []webhook.Verifier{std, st, gh} {
			if _, err := v.Verify(r, body, now); err == nil {
				// Only possible if the fuzzer found a valid MAC: it would have
				// to be the seed's own (the spec vector) at its own time.
				t.Fatalf("%T accepted a forged delivery: %v", v, h)
			}
		}
	})
}
