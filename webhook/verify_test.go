package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/webhook"
)

func request(h http.Header, body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	for k, vs := range h {
		r.Header[k] = append([]string(nil), vs...)
	}
	return r
}

func hmacSHA256(key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return m.Sum(nil)
}

// GitHub's published example (docs.github.com, "Validating webhook
// deliveries"): secret "It's a Secret to Everybody", payload "Hello, World!".
func TestGitHubKnownAnswer(t *testing.T) {
	t.Parallel()
	const want = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	g, err := webhook.NewGitHub("It's a Secret to Everybody")
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("X-Hub-Signature-256", want)
	h.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	h.Set("X-GitHub-Event", "push")
	d, err := g.Verify(request(h, "Hello, World!"), []byte("Hello, World!"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if d.ID != "72d3162e-cc78-11e3-81ab-4c9367dc0958" || d.Event != "push" {
		t.Fatalf("delivery %+v", d)
	}
	signed := http.Header{}
	if err := g.Sign(signed, webhook.Delivery{ID: "x"}, []byte("Hello, World!")); err != nil || signed.Get("X-Hub-Signature-256") != want {
		t.Fatalf("signer: %q %v", signed.Get("X-Hub-Signature-256"), err)
	}
	if got := "sha256=" + hex.EncodeToString(hmacSHA256([]byte("It's a Secret to Everybody"), []byte("Hello, World!"))); got != want {
		t.Fatalf("independent HMAC %s", got)
	}
}

// The Standard Webhooks specification's published test vector, and one
// derived independently from its description (HMAC-SHA256 over
// "id.timestamp.body" with the base64-decoded whsec_ key, base64 output).
func TestStandardKnownAnswer(t *testing.T) {
	t.Parallel()
	const (
		secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		id     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		ts     = "1614265330"
		body   = `{"test": 2432232314}`
		want   = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	s, err := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", ts)
	h.Set("webhook-signature", want)
	at := time.Unix(1614265330, 0)
	d, err := s.Verify(request(h, body), []byte(body), at)
	if err != nil || d.ID != id || !d.Timestamp.Equal(at) {
		t.Fatalf("spec vector: %+v %v", d, err)
	}
	signed := http.Header{}
	if err := s.Sign(signed, webhook.Delivery{ID: id, Timestamp: at}, []byte(body)); err != nil || signed.Get("webhook-signature") != want {
		t.Fatalf("signer: %q %v", signed.Get("webhook-signature"), err)
	}

	// Derived vector.
	key := []byte("a 24-byte secret for idem")
	secret2 := "whsec_" + base64.StdEncoding.EncodeToString(key)
	body2 := `{"type":"invoice.paid","data":{"id":"in_1"}}`
	mac := hmacSHA256(key, []byte("msg_derived.1700000000."+body2))
	s2, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{secret2}})
	h2 := http.Header{}
	h2.Set("webhook-id", "msg_derived")
	h2.Set("webhook-timestamp", "1700000000")
	h2.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac))
	if _, err := s2.Verify(request(h2, body2), []byte(body2), time.Unix(1700000000, 0)); err != nil {
		t.Fatalf("derived vector: %v", err)
	}
}

// A vector derived from Stripe's description (HMAC-SHA256 over
// "timestamp.body" keyed with the endpoint secret as is, hex output).
func TestStripeKnownAnswer(t *testing.T) {
	t.Parallel()
	const secret = "whsec_test_idem_stripe_secret"
	body := `{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"charge.succeeded"}`
	mac := hex.EncodeToString(hmacSHA256([]byte(secret), []byte("1492774577."+body)))
	s, err := webhook.NewStripe(webhook.StripeConfig{Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("Stripe-Signature", "t=1492774577,v1="+mac+",v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39")
	at := time.Unix(1492774577, 0)
	d, err := s.Verify(request(h, body), []byte(body), at)
	if err != nil || d.ID != "evt_1NG8Du2eZvKYlo2CUI79vXWy" || d.Event != "charge.succeeded" || !d.Timestamp.Equal(at) {
		t.Fatalf("vector: %+v %v", d, err)
	}
	signed := http.Header{}
	if err := s.Sign(signed, webhook.Delivery{Timestamp: at}, []byte(body)); err != nil || signed.Get("Stripe-Signature") != "t=1492774577,v1="+mac {
		t.Fatalf("signer: %q %v", signed.Get("Stripe-Signature"), err)
	}
}

// scheme bundles what the rejection table needs to know about a verifier.
type scheme struct {
	name      string
	verifier  webhook.Verifier
	other     webhook.Signer // signs with a wrong secret
	sign      func(t *testing.T, ts time.Time, body string) http.Header
	tolerance time.Duration // 0: no timestamp
	sigHeader string
	malformed []string // signature header values that must be rejected
}

func schemes(t *testing.T) []scheme {
	std, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{"whsec_" + base64.StdEncoding.EncodeToString([]byte("standard-secret-0123456789"))}})
	stdOther, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{"whsec_" + base64.StdEncoding.EncodeToString([]byte("wrong-secret-0123456789"))}})
	gh, _ := webhook.NewGitHub("github-secret")
	ghOther, _ := webhook.NewGitHub("wrong-secret")
	st, _ := webhook.NewStripe(webhook.StripeConfig{Secrets: []string{"whsec_stripe"}})
	stOther, _ := webhook.NewStripe(webhook.StripeConfig{Secrets: []string{"whsec_wrong"}})
	signer := func(s webhook.Signer) func(t *testing.T, ts time.Time, body string) http.Header {
		return func(t *testing.T, ts time.Time, body string) http.Header {
			h := http.Header{}
			if err := s.Sign(h, webhook.Delivery{ID: "msg_1", Timestamp: ts}, []byte(body)); err != nil {
				t.Fatal(err)
			}
			return h
		}
	}
	return []scheme{
		{name: "standard", verifier: std, other: stdOther, sign: signer(std), tolerance: 5 * time.Minute, sigHeader: "webhook-signature",
			malformed: []string{"", "v1", "v1,", ",abc", "v1,!!!notbase64", "v1,YWJj", "v2,abcd", "v1a,abcd"}},
		{name: "github", verifier: gh, other: ghOther, sign: signer(gh), sigHeader: "X-Hub-Signature-256",
			malformed: []string{"", "sha256=", "sha1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", "sha256=zz7107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", "sha256=7571", "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"}},
		{name: "stripe", verifier: st, other: stOther, sign: signer(st), tolerance: 300 * time.Second, sigHeader: "Stripe-Signature",
			malformed: []string{"", "t=1", "v1=" + strings.Repeat("a", 64), "t=abc,v1=" + strings.Repeat("a", 64), "t=1.5,v1=" + strings.Repeat("a", 64),
				"t=1,t=2,v1=" + strings.Repeat("a", 64), "t=1,v1=xyz", "t=1,junk", "t=-1,v1=" + strings.Repeat("a", 64)}},
	}
}

const eventBody = `{"id":"evt_1","type":"thing.happened","n":1}`

func TestVerifiersRejectForgeries(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_750_000_000, 0)
	for _, sc := range schemes(t) {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			verify := func(h http.Header, body string, at time.Time) error {
				_, err := sc.verifier.Verify(request(h, body), []byte(body), at)
				return err
			}
			if err := verify(sc.sign(t, now, eventBody), eventBody, now); err != nil {
				t.Fatalf("genuine delivery rejected: %v", err)
			}
			reject := func(what string, err error, want error) {
				t.Helper()
				if !errors.Is(err, webhook.ErrUnauthenticated) || (want != nil && !errors.Is(err, want)) {
					t.Fatalf("%s: err = %v, want %v", what, err, want)
				}
			}
			reject("tampered body", verify(sc.sign(t, now, eventBody), strings.Replace(eventBody, `"n":1`, `"n":2`, 1), now), webhook.ErrSignatureMismatch)
			reject("trailing byte", verify(sc.sign(t, now, eventBody), eventBody+" ", now), webhook.ErrSignatureMismatch)
			wrong := http.Header{}
			_ = sc.other.Sign(wrong, webhook.Delivery{ID: "msg_1", Timestamp: now}, []byte(eventBody))
			reject("wrong secret", verify(wrong, eventBody, now), webhook.ErrSignatureMismatch)

			missing := sc.sign(t, now, eventBody)
			missing.Del(sc.sigHeader)
			reject("missing signature", verify(missing, eventBody, now), webhook.ErrMissingSignature)
			for _, m := range sc.malformed {
				h := sc.sign(t, now, eventBody)
				h.Set(sc.sigHeader, m)
				reject("malformed "+strconv.Quote(m), verify(h, eventBody, now), webhook.ErrMalformedHeader)
			}
			dup := sc.sign(t, now, eventBody)
			dup.Add(sc.sigHeader, dup.Get(sc.sigHeader))
			reject("duplicate signature header", verify(dup, eventBody, now), webhook.ErrDuplicateHeader)

			if sc.tolerance == 0 {
				// No signed timestamp: a capture verifies at any time; dedup stops it.
				if err := verify(sc.sign(t, now, eventBody), eventBody, now.Add(24*time.Hour)); err != nil {
					t.Fatalf("GitHub delivery rejected later: %v", err)
				}
				return
			}
			sec := time.Second
			for _, c := range []struct {
				what string
				at   time.Time
				ok   bool
			}{
				{"stale, 1 s inside the tolerance", now.Add(sc.tolerance - sec), true},
				{"stale, exactly the tolerance", now.Add(sc.tolerance), true},
				{"stale, 1 s beyond the tolerance", now.Add(sc.tolerance + sec), false},
				{"future, 1 s inside the tolerance", now.Add(-sc.tolerance + sec), true},
				{"future, 1 s beyond the tolerance", now.Add(-sc.tolerance - sec), false},
			} {
				err := verify(sc.sign(t, now, eventBody), eventBody, c.at)
				if c.ok && err != nil {
					t.Fatalf("%s: %v", c.what, err)
				}
				if !c.ok {
					reject(c.what, err, webhook.ErrTimestampOutOfRange)
				}
			}
		})
	}
}

func TestStandardSpecifics(t *testing.T) {
	t.Parallel()
	k1, k2 := []byte("old-secret-0123456789abcd"), []byte("new-secret-0123456789abcd")
	sec := func(k []byte) string { return "whsec_" + base64.StdEncoding.EncodeToString(k) }
	now := time.Unix(1_750_000_000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	sig := func(k []byte, id, ts, body string) string {
		return "v1," + base64.StdEncoding.EncodeToString(hmacSHA256(k, []byte(id+"."+ts+"."+body)))
	}
	headers := stdHeaders
	// Rotation: the receiver knows both secrets; the sender signs with either.
	both, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{sec(k1), sec(k2)}})
	onlyNew, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{sec(k2)}})
	for _, sigs := range []string{
		sig(k1, "msg_1", ts, eventBody),
		sig(k2, "msg_1", ts, eventBody),
		"v1a," + base64.StdEncoding.EncodeToString(make([]byte, 64)) + " " + sig(k1, "msg_1", ts, eventBody) + " " + sig(k2, "msg_1", ts, eventBody),
		"v1," + base64.StdEncoding.EncodeToString(make([]byte, 32)) + " " + sig(k2, "msg_1", ts, eventBody),
	} {
		if _, err := both.Verify(request(headers("msg_1", ts, sigs), eventBody), []byte(eventBody), now); err != nil {
			t.Fatalf("rotation %q: %v", sigs, err)
		}
	}
	if _, err := onlyNew.Verify(request(headers("msg_1", ts, sig(k1, "msg_1", ts, eventBody)), eventBody), []byte(eventBody), now); !errors.Is(err, webhook.ErrSignatureMismatch) {
		t.Fatalf("retired secret accepted: %v", err)
	}
	// The signer emits one signature per secret.
	h := http.Header{}
	_ = both.Sign(h, webhook.Delivery{ID: "msg_1", Timestamp: now}, []byte(eventBody))
	if got := strings.Count(h.Get("webhook-signature"), "v1,"); got != 2 {
		t.Fatalf("signer emitted %d signatures", got)
	}
	// Ids and timestamps containing '.' are rejected even when "correctly"
	// signed: "a.b" + "." + ts is ambiguous.
	for _, c := range []struct{ id, ts string }{{"msg.1", ts}, {"msg_1", ts + ".0"}, {"msg_1", "1.75e9"}} {
		_, err := both.Verify(request(headers(c.id, c.ts, sig(k1, c.id, c.ts, eventBody)), eventBody), []byte(eventBody), now)
		if !errors.Is(err, webhook.ErrMalformedHeader) {
			t.Fatalf("id %q ts %q: %v", c.id, c.ts, err)
		}
	}
	// Duplicate id or timestamp headers.
	for _, name := range []string{"webhook-id", "webhook-timestamp"} {
		hh := headers("msg_1", ts, sig(k1, "msg_1", ts, eventBody))
		hh.Add(name, hh.Get(name))
		if _, err := both.Verify(request(hh, eventBody), []byte(eventBody), now); !errors.Is(err, webhook.ErrDuplicateHeader) {
			t.Fatalf("duplicate %s: %v", name, err)
		}
	}
	// An authentic delivery without an id: 400 class, not 401.
	hh := headers("", ts, sig(k1, "", ts, eventBody))
	hh.Del("webhook-id")
	if _, err := both.Verify(request(hh, eventBody), []byte(eventBody), now); !errors.Is(err, webhook.ErrMissingDeliveryID) {
		t.Fatalf("no id: %v", err)
	}
	// Missing timestamp.
	hh = headers("msg_1", ts, sig(k1, "msg_1", ts, eventBody))
	hh.Del("webhook-timestamp")
	if _, err := both.Verify(request(hh, eventBody), []byte(eventBody), now); !errors.Is(err, webhook.ErrMalformedHeader) {
		t.Fatalf("no timestamp: %v", err)
	}
	// Bad configuration.
	for _, cfg := range []webhook.StandardConfig{{}, {Secrets: []string{"whsec_***"}}, {Secrets: []string{"whsec_"}}, {Secrets: []string{sec(k1)}, Tolerance: -1}} {
		if _, err := webhook.NewStandard(cfg); err == nil {
			t.Fatalf("config %+v accepted", cfg)
		}
	}
	if _, err := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{base64.StdEncoding.EncodeToString(k1)}}); err != nil {
		t.Fatalf("bare base64 secret: %v", err)
	}
}

func TestStripeSpecifics(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_750_000_000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	mac := func(secret, body string) string {
		return hex.EncodeToString(hmacSHA256([]byte(secret), []byte(ts+"."+body)))
	}
	s, _ := webhook.NewStripe(webhook.StripeConfig{Secrets: []string{"whsec_old", "whsec_new"}})
	for _, hv := range []string{
		"t=" + ts + ",v1=" + mac("whsec_old", eventBody),
		"t=" + ts + ",v1=" + strings.Repeat("0", 64) + ",v1=" + mac("whsec_new", eventBody),
		"v1=" + mac("whsec_new", eventBody) + ",t=" + ts + ",v0=whatever",
	} {
		h := http.Header{}
		h.Set("Stripe-Signature", hv)
		if _, err := s.Verify(request(h, eventBody), []byte(eventBody), now); err != nil {
			t.Fatalf("%q: %v", hv, err)
		}
	}
	// Authentic but no event id in the body: 400 class.
	for _, body := range []string{`{"type":"x"}`, `not json`} {
		h := http.Header{}
		h.Set("Stripe-Signature", "t="+ts+",v1="+mac("whsec_old", body))
		if _, err := s.Verify(request(h, body), []byte(body), now); !errors.Is(err, webhook.ErrMissingDeliveryID) {
			t.Fatalf("body %q: %v", body, err)
		}
	}
	// The decoded secret is not the key: Stripe uses the whole string.
	h := http.Header{}
	h.Set("Stripe-Signature", "t="+ts+",v1="+mac("old", eventBody))
	if _, err := s.Verify(request(h, eventBody), []byte(eventBody), now); !errors.Is(err, webhook.ErrSignatureMismatch) {
		t.Fatalf("wrong key form accepted: %v", err)
	}
}

func TestGitHubSpecifics(t *testing.T) {
	t.Parallel()
	g, _ := webhook.NewGitHub("old", "new")
	body := "payload"
	h := http.Header{}
	h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(hmacSHA256([]byte("new"), []byte(body))))
	if _, err := g.Verify(request(h, body), []byte(body), time.Now()); !errors.Is(err, webhook.ErrMissingDeliveryID) {
		t.Fatalf("authentic without X-GitHub-Delivery: %v", err)
	}
	h.Set("X-GitHub-Delivery", "d-1")
	if d, err := g.Verify(request(h, body), []byte(body), time.Now()); err != nil || d.ID != "d-1" {
		t.Fatalf("rotated secret: %+v %v", d, err)
	}
	h.Add("X-GitHub-Delivery", "d-2")
	if _, err := g.Verify(request(h, body), []byte(body), time.Now()); !errors.Is(err, webhook.ErrDuplicateHeader) {
		t.Fatalf("two delivery ids: %v", err)
	}
	if _, err := webhook.NewGitHub(); err == nil {
		t.Fatal("no secret accepted")
	}
	if _, err := webhook.NewGitHub(""); err == nil {
		t.Fatal("empty secret accepted")
	}
}
