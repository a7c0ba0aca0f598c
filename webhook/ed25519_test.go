package webhook_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/webhook"
)

// The Standard Webhooks reference library's fixed v1a vector
// (standard-webhooks/standard-webhooks, libraries/go,
// TestAsymmetricWebhookSign): the 32-byte Ed25519 seed in base64, and the
// signature it makes over msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330.<body>.
// Ed25519 is deterministic, so the signer must reproduce it exactly.
const (
	refSeedB64 = "VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="
	refMsgID   = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	refTS      = 1614265330
	refBody    = `{"test": 2432232314}`
	refV1a     = "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag=="
)

// v1aKeys returns the reference vector's key pair as whsk_ / whpk_ strings,
// the public key derived here with crypto/ed25519, independently of the
// package.
func v1aKeys(t testing.TB) (signingKey, publicKey string) {
	t.Helper()
	seed, err := base64.StdEncoding.DecodeString(refSeedB64)
	if err != nil || len(seed) != ed25519.SeedSize {
		t.Fatalf("seed: %v", err)
	}
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	return "whsk_" + refSeedB64, "whpk_" + base64.StdEncoding.EncodeToString(pub)
}

// stdHeaders returns Standard Webhooks headers under their webhook-* names.
func stdHeaders(id, ts, sigs string) http.Header { return namedHeaders("webhook-", id, ts, sigs) }

// namedHeaders returns Standard Webhooks headers under prefix ("webhook-"
// or "svix-").
func namedHeaders(prefix, id, ts, sigs string) http.Header {
	h := http.Header{}
	h.Set(prefix+"id", id)
	h.Set(prefix+"timestamp", ts)
	h.Set(prefix+"signature", sigs)
	return h
}

func TestStandardV1aKnownAnswer(t *testing.T) {
	t.Parallel()
	sk, pk := v1aKeys(t)
	at := time.Unix(refTS, 0)
	for _, key := range []string{sk, refSeedB64} { // prefixed and bare, as the reference accepts both
		signer, err := webhook.NewStandard(webhook.StandardConfig{SigningKeys: []string{key}})
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		if err := signer.Sign(h, webhook.Delivery{ID: refMsgID, Timestamp: at}, []byte(refBody)); err != nil {
			t.Fatal(err)
		}
		if got := h.Get("webhook-signature"); got != refV1a {
			t.Fatalf("signer: %q, want the reference %q", got, refV1a)
		}
	}
	verifier, err := webhook.NewStandard(webhook.StandardConfig{PublicKeys: []string{pk}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := verifier.Verify(request(stdHeaders(refMsgID, strconv.Itoa(refTS), refV1a), refBody), []byte(refBody), at)
	if err != nil || d.ID != refMsgID || !d.Timestamp.Equal(at) {
		t.Fatalf("reference vector: %+v %v", d, err)
	}
	// Independently: the vector is an Ed25519 signature over id.ts.body.
	pub, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(pk, "whpk_"))
	sig, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(refV1a, "v1a,"))
	if !ed25519.Verify(pub, []byte(refMsgID+"."+strconv.Itoa(refTS)+"."+refBody), sig) {
		t.Fatal("the reference vector does not verify with crypto/ed25519")
	}
}

// Item 15: v1a verifies next to v1, and a signature of one version is never
// accepted as the other.
func TestStandardV1aNeverAcceptedAsV1(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_750_000_000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	sk, pk := v1aKeys(t)
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("hmac-secret-0123456789abcd"))
	v1Signer, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{secret}})
	v1aSigner, _ := webhook.NewStandard(webhook.StandardConfig{SigningKeys: []string{sk}})
	hmacOnly, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{secret}})
	keyOnly, _ := webhook.NewStandard(webhook.StandardConfig{PublicKeys: []string{pk}})
	both, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{secret}, PublicKeys: []string{pk}})

	sign := func(s *webhook.Standard, id string) string {
		h := http.Header{}
		if err := s.Sign(h, webhook.Delivery{ID: id, Timestamp: now}, []byte(eventBody)); err != nil {
			t.Fatal(err)
		}
		return h.Get("webhook-signature")
	}
	v1, v1a := sign(v1Signer, "msg_1"), sign(v1aSigner, "msg_1")
	if !strings.HasPrefix(v1, "v1,") || !strings.HasPrefix(v1a, "v1a,") {
		t.Fatalf("signers: %q %q", v1, v1a)
	}
	verify := func(s *webhook.Standard, sigs string) error {
		_, err := s.Verify(request(stdHeaders("msg_1", ts, sigs), eventBody), []byte(eventBody), now)
		return err
	}
	for _, c := range []struct {
		what string
		v    *webhook.Standard
		sigs string
		want error // nil: accepted
	}{
		{"HMAC verifier, v1", hmacOnly, v1, nil},
		{"HMAC verifier, v1a only: ignored", hmacOnly, v1a, webhook.ErrSignatureMismatch},
		{"HMAC verifier, v1a then v1", hmacOnly, v1a + " " + v1, nil},
		{"key verifier, v1a", keyOnly, v1a, nil},
		{"key verifier, v1 only: ignored", keyOnly, v1, webhook.ErrSignatureMismatch},
		{"key verifier, v1 then v1a", keyOnly, v1 + " " + v1a, nil},
		{"both kinds, v1", both, v1, nil},
		{"both kinds, v1a", both, v1a, nil},
		// A genuine signature under the other version's label: the lengths
		// differ (32 and 64 bytes), so it is not even well-formed.
		{"v1a signature labelled v1", both, "v1," + strings.TrimPrefix(v1a, "v1a,"), webhook.ErrMalformedHeader},
		{"v1 signature labelled v1a", both, "v1a," + strings.TrimPrefix(v1, "v1,"), webhook.ErrMalformedHeader},
		{"v1a over another id", keyOnly, sign(v1aSigner, "msg_2"), webhook.ErrSignatureMismatch},
		{"v1a by another key", keyOnly, sign(mustStandard(t, webhook.StandardConfig{SigningKeys: []string{generated(t)}}), "msg_1"), webhook.ErrSignatureMismatch},
	} {
		err := verify(c.v, c.sigs)
		if c.want == nil && err != nil {
			t.Errorf("%s: %v", c.what, err)
		}
		if c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.what, err, c.want)
		}
	}
	// A tampered body or timestamp fails v1a too; the tolerance applies.
	if _, err := keyOnly.Verify(request(stdHeaders("msg_1", ts, v1a), eventBody+" "), []byte(eventBody+" "), now); !errors.Is(err, webhook.ErrSignatureMismatch) {
		t.Errorf("tampered body: %v", err)
	}
	if _, err := keyOnly.Verify(request(stdHeaders("msg_1", strconv.FormatInt(now.Unix()+1, 10), v1a), eventBody), []byte(eventBody), now); !errors.Is(err, webhook.ErrSignatureMismatch) {
		t.Errorf("tampered timestamp: %v", err)
	}
	if _, err := keyOnly.Verify(request(stdHeaders("msg_1", ts, v1a), eventBody), []byte(eventBody), now.Add(webhook.DefaultTolerance+time.Second)); !errors.Is(err, webhook.ErrTimestampOutOfRange) {
		t.Errorf("stale v1a: %v", err)
	}
}

func mustStandard(t *testing.T, cfg webhook.StandardConfig) *webhook.Standard {
	t.Helper()
	s, err := webhook.NewStandard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func generated(t *testing.T) string {
	t.Helper()
	sk, _, err := webhook.GenerateStandardKeyPair(nil)
	if err != nil {
		t.Fatal(err)
	}
	return sk
}

func TestStandardV1aKeysAndRotation(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_750_000_000, 0)
	sk, pk := v1aKeys(t)
	sk2, pk2, err := webhook.GenerateStandardKeyPair(nil)
	if err != nil || !strings.HasPrefix(sk2, "whsk_") || !strings.HasPrefix(pk2, "whpk_") {
		t.Fatalf("GenerateStandardKeyPair: %q %q %v", sk2, pk2, err)
	}
	// Rotation: the receiver knows both public keys; the sender signs with either.
	rx := mustStandard(t, webhook.StandardConfig{PublicKeys: []string{pk, pk2}})
	for _, key := range []string{sk, sk2} {
		h := http.Header{}
		if err := mustStandard(t, webhook.StandardConfig{SigningKeys: []string{key}}).Sign(h, webhook.Delivery{ID: "msg_1", Timestamp: now}, []byte(eventBody)); err != nil {
			t.Fatal(err)
		}
		if _, err := rx.Verify(request(h, eventBody), []byte(eventBody), now); err != nil {
			t.Errorf("rotation: %v", err)
		}
	}
	// A signer with a secret and a key emits v1 then v1a, and verifies its own.
	mixed := mustStandard(t, webhook.StandardConfig{Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, SigningKeys: []string{sk}})
	h := http.Header{}
	_ = mixed.Sign(h, webhook.Delivery{ID: "msg_1", Timestamp: now}, []byte(eventBody))
	entries := strings.Split(h.Get("webhook-signature"), " ")
	if len(entries) != 2 || !strings.HasPrefix(entries[0], "v1,") || !strings.HasPrefix(entries[1], "v1a,") {
		t.Fatalf("mixed signer: %q", h.Get("webhook-signature"))
	}
	if _, err := mixed.Verify(request(h, eventBody), []byte(eventBody), now); err != nil {
		t.Fatalf("mixed self-verify: %v", err)
	}
	// The 64-byte private key form (seed ‖ public key) is the same key.
	seed, _ := base64.StdEncoding.DecodeString(refSeedB64)
	full := ed25519.NewKeyFromSeed(seed)
	h64 := http.Header{}
	_ = mustStandard(t, webhook.StandardConfig{SigningKeys: []string{"whsk_" + base64.StdEncoding.EncodeToString(full)}}).Sign(h64, webhook.Delivery{ID: refMsgID, Timestamp: time.Unix(refTS, 0)}, []byte(refBody))
	if h64.Get("webhook-signature") != refV1a {
		t.Fatalf("64-byte key: %q", h64.Get("webhook-signature"))
	}
	// A verifier with public keys only cannot sign.
	if err := rx.Sign(http.Header{}, webhook.Delivery{ID: "msg_1"}, nil); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("public-key-only Sign: %v", err)
	}
	// Bad keys, including a key of one kind in another kind's place (a
	// public key used as an HMAC secret would let anyone forge v1).
	bad := append([]byte(nil), full...)
	bad[63] ^= 1
	pkRaw := strings.TrimPrefix(pk, "whpk_")
	for _, cfg := range []webhook.StandardConfig{
		{Secrets: []string{pk}},
		{Secrets: []string{sk}},
		{PublicKeys: []string{sk}},
		{PublicKeys: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}},
		{SigningKeys: []string{pk}},
		{PublicKeys: []string{"whpk_" + base64.StdEncoding.EncodeToString(make([]byte, 31))}},
		{PublicKeys: []string{"whpk_" + paddingVariants(t, pkRaw)[0]}}, // padding bits set
		{Secrets: []string{"whsec_" + paddingVariants(t, base64.StdEncoding.EncodeToString([]byte("a 20-byte secret key")))[0]}},
		{SigningKeys: []string{"whsk_" + base64.StdEncoding.EncodeToString(make([]byte, 16))}},
		{SigningKeys: []string{"whsk_" + base64.StdEncoding.EncodeToString(bad)}}, // public half not its own
	} {
		if _, err := webhook.NewStandard(cfg); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("config %+v: %v", cfg, err)
		}
	}
	// Small-order public keys (the all-zero placeholder is one) are refused:
	// under them the trivial signature verifies for a share of all messages.
	identity := make([]byte, 32)
	identity[0] = 1
	for _, raw := range [][]byte{make([]byte, 32), identity} {
		forgery := append(append([]byte(nil), identity...), make([]byte, 32)...)
		forged := false
		for i := range 64 {
			forged = forged || ed25519.Verify(raw, []byte{byte(i)}, forgery)
		}
		if !forged {
			t.Fatalf("key %x: the trivial forgery never verified; the test premise is wrong", raw)
		}
		if _, err := webhook.NewStandard(webhook.StandardConfig{PublicKeys: []string{"whpk_" + base64.StdEncoding.EncodeToString(raw)}}); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("small-order key %x accepted: %v", raw, err)
		}
	}
	// A signing key's public key verifies, so one Standard signs and checks.
	self := mustStandard(t, webhook.StandardConfig{SigningKeys: []string{sk}})
	hs := http.Header{}
	_ = self.Sign(hs, webhook.Delivery{ID: "msg_1", Timestamp: now}, []byte(eventBody))
	if _, err := self.Verify(request(hs, eventBody), []byte(eventBody), now); err != nil {
		t.Fatalf("self-verify: %v", err)
	}
}

// The signature list is bounded: a forger cannot make one request cost
// thousands of Ed25519 verifications.
func TestStandardSignatureListBounded(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_750_000_000, 0)
	sk, pk := v1aKeys(t)
	h := http.Header{}
	_ = mustStandard(t, webhook.StandardConfig{SigningKeys: []string{sk}}).Sign(h, webhook.Delivery{ID: "msg_1", Timestamp: now}, []byte(eventBody))
	genuine := h.Get("webhook-signature")
	junk := "v1a," + base64.StdEncoding.EncodeToString(make([]byte, 64))
	rx := mustStandard(t, webhook.StandardConfig{PublicKeys: []string{pk}})
	list := func(n int) string {
		return strings.Repeat(junk+" ", n-1) + genuine
	}
	h.Set("webhook-signature", list(webhook.MaxStandardSignatures))
	if _, err := rx.Verify(request(h, eventBody), []byte(eventBody), now); err != nil {
		t.Fatalf("%d entries: %v", webhook.MaxStandardSignatures, err)
	}
	h.Set("webhook-signature", list(webhook.MaxStandardSignatures+1))
	if _, err := rx.Verify(request(h, eventBody), []byte(eventBody), now); !errors.Is(err, webhook.ErrMalformedHeader) {
		t.Fatalf("%d entries: %v", webhook.MaxStandardSignatures+1, err)
	}
}
