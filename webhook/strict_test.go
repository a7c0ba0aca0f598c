package webhook_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/webhook"
)

// paddingVariants returns the other spellings of the canonical standard
// base64 text b64 that a non-strict decoder maps to the same bytes: the last
// data character with its unused (padding) bits changed.
func paddingVariants(t testing.TB, b64 string) []string {
	t.Helper()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	data := strings.TrimRight(b64, "=")
	pad := len(b64) - len(data)
	if pad == 0 {
		t.Fatalf("%q has no padding, so no unused bits", b64)
	}
	unused := map[int]int{1: 2, 2: 4}[pad] // bits of the last character that carry nothing
	last := strings.IndexByte(alphabet, data[len(data)-1])
	var out []string
	for v := 1; v < 1<<unused; v++ {
		out = append(out, data[:len(data)-1]+string(alphabet[last^v])+b64[len(data):])
	}
	// Self-check: the lenient decoder really does accept them as the same
	// bytes, so the test below is about strictness and nothing else.
	want, _ := base64.StdEncoding.DecodeString(b64)
	for _, v := range out {
		got, err := base64.StdEncoding.DecodeString(v)
		if err != nil || string(got) != string(want) {
			t.Fatalf("variant %q is not a lenient spelling of %q", v, b64)
		}
	}
	return out
}

// Item 13: a signature is accepted only in its one canonical spelling. A
// base64 signature whose last character differs in its padding bits only,
// an uppercase hex signature, and odd-length or wrong-length hex are
// rejected as malformed, by every verifier.
func TestSignaturesDecodedStrictly(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_750_000_000, 0)
	body := []byte(eventBody)
	verify := func(v webhook.Verifier, h http.Header) error {
		_, err := v.Verify(request(h, eventBody), body, now)
		return err
	}
	mustReject := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, webhook.ErrMalformedHeader) {
			t.Errorf("%s: err = %v, want ErrMalformedHeader", what, err)
		}
	}

	sk, pk := v1aKeys(t)
	hmacStd := mustStandard(t, webhook.StandardConfig{Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}})
	for _, c := range []struct {
		version          string
		signer, verifier *webhook.Standard
	}{
		{"v1", hmacStd, hmacStd},
		{"v1a", mustStandard(t, webhook.StandardConfig{SigningKeys: []string{sk}}), mustStandard(t, webhook.StandardConfig{PublicKeys: []string{pk}})},
	} {
		t.Run("standard "+c.version, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if err := c.signer.Sign(h, webhook.Delivery{ID: "msg_1", Timestamp: now}, body); err != nil {
				t.Fatal(err)
			}
			if err := verify(c.verifier, h); err != nil {
				t.Fatalf("genuine: %v", err)
			}
			sig, _ := strings.CutPrefix(h.Get("webhook-signature"), c.version+",")
			for _, v := range paddingVariants(t, sig) {
				h.Set("webhook-signature", c.version+","+v)
				mustReject(t, c.version+","+v, verify(c.verifier, h))
				if _, err := webhook.ParseStandardSignatures(c.version + "," + v); !errors.Is(err, webhook.ErrMalformedHeader) {
					t.Errorf("parser accepted %s,%s: %v", c.version, v, err)
				}
			}
			// Line breaks inside the base64, which even base64's Strict
			// decoder skips.
			for _, nl := range []string{"\n", "\r", "\r\n"} {
				h.Set("webhook-signature", c.version+","+sig[:20]+nl+sig[20:])
				mustReject(t, "line break in base64", verify(c.verifier, h))
			}
		})
	}

	t.Run("github", func(t *testing.T) {
		t.Parallel()
		g, _ := webhook.NewGitHub("It's a Secret to Everybody")
		const sig = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
		h := http.Header{}
		h.Set("X-GitHub-Delivery", "d-1")
		h.Set("X-Hub-Signature-256", "sha256="+sig)
		if _, err := g.Verify(request(h, "Hello, World!"), []byte("Hello, World!"), now); err != nil {
			t.Fatalf("genuine: %v", err)
		}
		for _, bad := range []string{
			"sha256=" + strings.ToUpper(sig),
			"sha256=" + sig[:63] + "E", // one uppercase digit
			"sha256=" + sig[:63],       // odd length
			"sha256=" + sig + "0",      // odd length, too long
			"sha256=" + sig + "00",     // too long
			"SHA256=" + sig,
		} {
			h.Set("X-Hub-Signature-256", bad)
			_, err := g.Verify(request(h, "Hello, World!"), []byte("Hello, World!"), now)
			mustReject(t, bad, err)
		}
	})

	t.Run("stripe", func(t *testing.T) {
		t.Parallel()
		s, _ := webhook.NewStripe(webhook.StripeConfig{Secrets: []string{"whsec_stripe"}})
		h := http.Header{}
		if err := s.Sign(h, webhook.Delivery{Timestamp: now}, body); err != nil {
			t.Fatal(err)
		}
		if err := verify(s, h); err != nil {
			t.Fatalf("genuine: %v", err)
		}
		tPart, sig, _ := strings.Cut(h.Get("Stripe-Signature"), ",v1=")
		for _, bad := range []string{
			tPart + ",v1=" + strings.ToUpper(sig),
			tPart + ",v1=" + sig[:63],
			tPart + ",v1=" + sig + "0",
			tPart + ",v1=" + sig + "00",
		} {
			h.Set("Stripe-Signature", bad)
			mustReject(t, bad, verify(s, h))
		}
	})
}
