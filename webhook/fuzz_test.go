package webhook_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/webhook"
)

// The parsers must never panic, must fail only with ErrMalformedHeader, and
// what they accept must have the shape of a signature and be spelled
// canonically in the input: re-encoding an accepted signature gives back
// the text it was read from, so no second spelling of one signature exists.
// The seeds run in every plain `go test`.

func FuzzParseStandardSignatures(f *testing.F) {
	v1 := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	v1a := "v1a," + base64.StdEncoding.EncodeToString(make([]byte, 64))
	for _, s := range []string{
		v1, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OF=", // padding bits set
		"v1,a v1,b", "v1a,x " + v1, v1a, v1a + " " + v1, "v1a,AAAA" + strings.Repeat("A", 80) + "B==",
		"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3\nuFJELVlNIOLJ1OE=", "v2,abc " + v1, strings.Repeat(v1+" ", 17),
		"", " ", ",", "v1,,", "v1,====", "\x00v1,\xff", "v1a," + v1, "v1," + strings.TrimPrefix(v1a, "v1a,"),
	} {
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
		entries := strings.Split(h, " ")
		if len(sigs) == 0 || len(sigs) > webhook.MaxStandardSignatures {
			t.Fatalf("%q: %d signatures", h, len(sigs))
		}
		for _, s := range sigs {
			size := map[string]int{"v1": sha256.Size, "v1a": ed25519.SignatureSize}[s.Version]
			if size == 0 || len(s.Signature) != size {
				t.Fatalf("%q: %s signature of %d bytes", h, s.Version, len(s.Signature))
			}
			if text := s.Version + "," + base64.StdEncoding.EncodeToString(s.Signature); !slices.Contains(entries, text) {
				t.Fatalf("%q: accepted a non-canonical spelling of %q", h, text)
			}
		}
	})
}

func FuzzParseStripeSignature(f *testing.F) {
	v1 := "v1=" + strings.Repeat("ab", 32)
	for _, s := range []string{
		"t=1492774577," + v1, "t=1," + v1 + "," + v1, "t=1,t=2," + v1, v1 + ",t=9", "t=,v1=", "=,=", "t=1e3," + v1,
		"t=1 ,  " + v1, "", "t=1,v1=" + strings.Repeat("AB", 32), "t=1,v1=" + strings.Repeat("a", 63), "t=1,v1=" + strings.Repeat("a", 65),
		"t=+1," + v1, "t=0x10," + v1, "t=1,v1=" + strings.Repeat("ab", 31) + "aB",
	} {
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
		if ts == "" || strings.Trim(ts, "0123456789") != "" || len(ts) > 12 || len(sigs) == 0 {
			t.Fatalf("%q: accepted t=%q with %d signatures", h, ts, len(sigs))
		}
		var items []string
		for item := range strings.SplitSeq(h, ",") {
			items = append(items, strings.TrimSpace(item))
		}
		if !slices.Contains(items, "t="+ts) {
			t.Fatalf("%q: t=%q is not an item", h, ts)
		}
		for _, s := range sigs {
			if len(s) != sha256.Size || !slices.Contains(items, "v1="+hex.EncodeToString(s)) {
				t.Fatalf("%q: accepted a signature of %d bytes not spelled canonically", h, len(s))
			}
		}
	})
}

func FuzzParseGitHubSignature(f *testing.F) {
	const sig = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	for _, s := range []string{"sha256=" + sig, "sha256=", "sha1=ab", "", "sha256=" + strings.Repeat("G", 64), "sha256=" + strings.ToUpper(sig), "sha256=" + sig[:63], "sha256=" + sig + "0", " sha256=" + sig, "SHA256=" + sig} {
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
		if len(sig) != sha256.Size || h != "sha256="+hex.EncodeToString(sig) {
			t.Fatalf("%q accepted", h)
		}
	})
}

// Whatever headers an attacker sends, a verifier without the secret's MAC
// or the private key's signature never accepts, and never panics.
func FuzzVerifyForged(f *testing.F) {
	f.Add("msg_1", "1750000000", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "t=1750000000,v1="+strings.Repeat("0", 64), "sha256="+strings.Repeat("0", 64), []byte(`{"id":"evt"}`))
	f.Add(refMsgID, "1750000000", refV1a, "t=1750000000", "sha256=", []byte(refBody)) // the reference v1a, at the wrong time
	std, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}})
	_, pk := v1aKeys(f)
	stdKey, _ := webhook.NewStandard(webhook.StandardConfig{PublicKeys: []string{pk}})
	st, _ := webhook.NewStripe(webhook.StripeConfig{Secrets: []string{"whsec_x"}})
	gh, _ := webhook.NewGitHub("secret")
	now := time.Unix(1_750_000_000, 0)
	f.Fuzz(func(t *testing.T, id, ts, stdSig, stripeSig, ghSig string, body []byte) {
		for _, prefix := range []string{"webhook-", "svix-"} {
			h := http.Header{}
			h.Set(prefix+"id", id)
			h.Set(prefix+"timestamp", ts)
			h.Set(prefix+"signature", stdSig)
			h.Set("Stripe-Signature", stripeSig)
			h.Set("X-Hub-Signature-256", ghSig)
			h.Set("X-GitHub-Delivery", id)
			r := request(h, string(body))
			for _, v := range []webhook.Verifier{std, stdKey, st, gh} {
				if _, err := v.Verify(r, body, now); err == nil {
					// Only possible if the fuzzer found a valid MAC or
					// signature: the seeds' vectors are for another time.
					t.Fatalf("%T accepted a forged delivery: %v", v, h)
				}
			}
		}
	})
}

// Starting from genuinely signed deliveries, any change to the signature
// header is accepted only if the header still carries the genuine signature
// in its one canonical spelling: a verifier never accepts a signature that
// does not verify, whatever its encoding tricks.
func FuzzVerifyMutatedSignature(f *testing.F) {
	now := time.Unix(1_750_000_000, 0)
	body := []byte(eventBody)
	sk, pk := v1aKeys(f)
	signer, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, SigningKeys: []string{sk}})
	std, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, PublicKeys: []string{pk}})
	st, _ := webhook.NewStripe(webhook.StripeConfig{Secrets: []string{"whsec_stripe"}})
	gh, _ := webhook.NewGitHub("github-secret")
	genuine := http.Header{}
	for _, s := range []webhook.Signer{signer, st, gh} {
		if err := s.Sign(genuine, webhook.Delivery{ID: "msg_1", Timestamp: now}, body); err != nil {
			f.Fatal(err)
		}
	}
	stdEntries := strings.Split(genuine.Get("webhook-signature"), " ") // [v1,… v1a,…]
	stripeT, stripeV1, _ := strings.Cut(genuine.Get("Stripe-Signature"), ",")
	ghSig := genuine.Get("X-Hub-Signature-256")
	// Seeds: the genuine values, and each with its last significant
	// character's padding bits or case changed.
	v1, v1a := stdEntries[0], stdEntries[1]
	f.Add(genuine.Get("webhook-signature"), genuine.Get("Stripe-Signature"), ghSig)
	for i, p := range paddingVariants(f, strings.TrimPrefix(v1, "v1,")) {
		f.Add("v1,"+p+" v1a,"+paddingVariants(f, strings.TrimPrefix(v1a, "v1a,"))[i], stripeT+","+strings.ToUpper(stripeV1), strings.ToUpper(ghSig))
	}
	f.Add(v1a+" "+v1, stripeV1+","+stripeT, "sha256="+strings.TrimPrefix(ghSig, "sha256=")[:63])
	f.Add("v1,"+strings.TrimPrefix(v1a, "v1a,"), stripeT+",v1="+strings.Repeat("0", 64), ghSig+" ")
	f.Fuzz(func(t *testing.T, stdSig, stripeSig, githubSig string) {
		for _, prefix := range []string{"webhook-", "svix-"} {
			h := http.Header{}
			h.Set(prefix+"id", "msg_1")
			h.Set(prefix+"timestamp", genuine.Get("webhook-timestamp"))
			h.Set(prefix+"signature", stdSig)
			if _, err := std.Verify(request(h, eventBody), body, now); err == nil {
				entries := strings.Split(stdSig, " ")
				if !slices.Contains(entries, v1) && !slices.Contains(entries, v1a) {
					t.Fatalf("Standard accepted %q", stdSig)
				}
			}
		}
		h := http.Header{}
		h.Set("Stripe-Signature", stripeSig)
		if _, err := st.Verify(request(h, eventBody), body, now); err == nil {
			var items []string
			for item := range strings.SplitSeq(stripeSig, ",") {
				items = append(items, strings.TrimSpace(item))
			}
			if !slices.Contains(items, stripeT) || !slices.Contains(items, stripeV1) {
				t.Fatalf("Stripe accepted %q", stripeSig)
			}
		}
		h = http.Header{}
		h.Set("X-Hub-Signature-256", githubSig)
		h.Set("X-GitHub-Delivery", "msg_1")
		if _, err := gh.Verify(request(h, eventBody), body, now); err == nil && githubSig != ghSig {
			t.Fatalf("GitHub accepted %q", githubSig)
		}
	})
}
