package webhook_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/webhook"
)

type env struct {
	srv    *httptest.Server
	signer webhook.Signer
	count  func(t *testing.T, sql string, args ...any) int
	fail   *atomic.Bool // makes Enqueue fail (transient)
	panic  *atomic.Bool // makes Enqueue panic
	inbox  string       // the inbox table
	seen   *counts      // what the receiver told its Observer
}

// counts is the receiver's Observer under test.
type counts struct {
	obs.NopObserver
	processed, duplicates, conflicts atomic.Int64
}

func (c *counts) Processed(consumer string) {
	if consumer == "webhook:billing" {
		c.processed.Add(1)
	}
}

func (c *counts) DuplicateContext(_ context.Context, component, consumer string) {
	if component == "webhook" && consumer == "webhook:billing" {
		c.duplicates.Add(1)
	}
}

func (c *counts) FingerprintConflict(component, consumer string) {
	if component == "webhook" && consumer == "webhook:billing" {
		c.conflicts.Add(1)
	}
}

var stdSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("receiver-secret-0123456789"))

func newEnv[TTx any](t testing.TB, d store.Driver[TTx]) *env {
	t.Helper()
	testdb.Exec(t, d, `CREATE TABLE jobs (delivery_id text NOT NULL, body text NOT NULL)`)
	ib, err := inbox.New(d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	std, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{stdSecret}})
	fail, panicking := &atomic.Bool{}, &atomic.Bool{}
	seen := &counts{}
	rc, err := webhook.NewReceiver(ib, webhook.ReceiverConfig[TTx]{
		Observer:     seen,
		Source:       "billing",
		Verifier:     std,
		MaxBodyBytes: 1024,
		EnqueueTx: func(ctx context.Context, tx TTx, del webhook.Delivery, body []byte) error {
			if fail.Load() {
				return errors.New("queue unavailable")
			}
			if panicking.Load() {
				if _, err := d.Tx(tx).Exec(ctx, `INSERT INTO jobs (delivery_id, body) VALUES ($1, $2)`, del.ID, "half"); err != nil {
					return err
				}
				panic("enqueue bug")
			}
			if del.Source != "billing" {
				t.Errorf("source %q", del.Source)
			}
			// A plain job row: deliberately no unique key, so a second
			// enqueue would show up as a second row.
			_, err := d.Tx(tx).Exec(ctx, `INSERT INTO jobs (delivery_id, body) VALUES ($1, $2)`, del.ID, string(body))
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	return &env{
		srv: srv, signer: std, fail: fail, panic: panicking, inbox: d.Table("inbox"), seen: seen,
		count: func(t *testing.T, sql string, args ...any) int { return testdb.Count(t, d, sql, args...) },
	}
}

func forEachStore(t *testing.T, test func(t *testing.T, e *env)) {
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { test(t, newEnv(t, d.D)) })
}

func (e *env) post(t *testing.T, h http.Header, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL, strings.NewReader(body))
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode >= 400 && resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("error %d without problem+json", resp.StatusCode)
	}
	if resp.StatusCode >= 400 && (out["type"] != "about:blank" || out["status"] != float64(resp.StatusCode) || out["title"] == "" || out["detail"] == "") {
		t.Errorf("error %d with problem document %v, want type about:blank, its status, a title and a detail", resp.StatusCode, out)
	}
	if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "1" {
		t.Errorf("503 with Retry-After %q, want 1", resp.Header.Get("Retry-After"))
	}
	return resp.StatusCode, out
}

func (e *env) signed(t *testing.T, id, body string) http.Header {
	h := http.Header{}
	if err := e.signer.Sign(h, webhook.Delivery{ID: id, Timestamp: time.Now()}, []byte(body)); err != nil {
		t.Fatal(err)
	}
	return h
}

func (e *env) jobs(t *testing.T, id string) int {
	return e.count(t, `SELECT count(*) FROM jobs WHERE delivery_id = $1`, id)
}

func (e *env) receipts(t *testing.T, id string) int {
	return e.count(t, `SELECT count(*) FROM `+e.inbox+` WHERE consumer = 'webhook:billing' AND message_id = $1`, id)
}

// The webhook-replay guarantee (what the webhook-replay scenario of `idem
// drill` checks end to end): a webhook replayed 10 times, sequentially and
// concurrently → one receipt, one enqueued job; every replay answered 2xx.
func TestReplayedWebhook(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		body := `{"type":"invoice.paid","invoice":"in_1"}`
		h := e.signed(t, "msg_seq", body)
		for i := range 10 {
			status, out := e.post(t, h, body)
			want, word := http.StatusOK, "duplicate"
			if i == 0 {
				want, word = http.StatusAccepted, "accepted"
			}
			if status != want || out["status"] != word || out["delivery_id"] != "msg_seq" {
				t.Fatalf("delivery %d: %d %v", i, status, out)
			}
		}
		if e.jobs(t, "msg_seq") != 1 || e.receipts(t, "msg_seq") != 1 {
			t.Fatalf("sequential: jobs=%d receipts=%d", e.jobs(t, "msg_seq"), e.receipts(t, "msg_seq"))
		}

		body = `{"type":"invoice.paid","invoice":"in_2"}`
		h = e.signed(t, "msg_conc", body)
		var wg sync.WaitGroup
		var accepted, duplicate atomic.Int64
		start := make(chan struct{})
		for range 10 {
			wg.Go(func() {
				<-start
				switch status, _ := e.post(t, h, body); status {
				case http.StatusAccepted:
					accepted.Add(1)
				case http.StatusOK:
					duplicate.Add(1)
				default:
					t.Errorf("concurrent replay: status %d", status)
				}
			})
		}
		close(start)
		wg.Wait()
		if accepted.Load() != 1 || duplicate.Load() != 9 {
			t.Fatalf("concurrent: accepted=%d duplicate=%d", accepted.Load(), duplicate.Load())
		}
		if e.jobs(t, "msg_conc") != 1 || e.receipts(t, "msg_conc") != 1 {
			t.Fatalf("concurrent: jobs=%d receipts=%d", e.jobs(t, "msg_conc"), e.receipts(t, "msg_conc"))
		}
		// The Observer counts the two first deliveries and the 18 replays.
		if p, d := e.seen.processed.Load(), e.seen.duplicates.Load(); p != 2 || d != 18 {
			t.Errorf("observed processed=%d duplicates=%d, want 2 and 18", p, d)
		}
	})
}

func TestReceiverRejections(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		body := `{"n":1}`
		total := func() int {
			return e.count(t, `SELECT count(*) FROM jobs`) + e.count(t, `SELECT count(*) FROM `+e.inbox)
		}

		// Forged: 401, nothing recorded.
		h := e.signed(t, "msg_1", body)
		if status, _ := e.post(t, h, `{"n":2}`); status != http.StatusUnauthorized {
			t.Fatalf("tampered: %d", status)
		}
		stale := http.Header{}
		_ = e.signer.Sign(stale, webhook.Delivery{ID: "msg_1", Timestamp: time.Now().Add(-10 * time.Minute)}, []byte(body))
		if status, _ := e.post(t, stale, body); status != http.StatusUnauthorized {
			t.Fatalf("stale: %d", status)
		}
		dup := e.signed(t, "msg_1", body)
		dup.Add("webhook-signature", dup.Get("webhook-signature"))
		if status, _ := e.post(t, dup, body); status != http.StatusUnauthorized {
			t.Fatalf("duplicate header: %d", status)
		}
		if status, _ := e.post(t, http.Header{}, body); status != http.StatusUnauthorized {
			t.Fatalf("unsigned: %d", status)
		}
		// Authentic but without an id: 400.
		noID := e.signed(t, "x", body)
		noID.Del("webhook-id")
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(stdSecret, "whsec_"))
		noID.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(hmacSHA256(key, []byte("."+noID.Get("webhook-timestamp")+"."+body))))
		if status, _ := e.post(t, noID, body); status != http.StatusBadRequest {
			t.Fatalf("no id: %d", status)
		}
		// Too large: 413 before anything else.
		big := strings.Repeat("x", 2048)
		if status, _ := e.post(t, e.signed(t, "msg_big", big), big); status != http.StatusRequestEntityTooLarge {
			t.Fatalf("too large: %d", status)
		}
		// Not a POST.
		resp, err := http.Get(e.srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("GET: %d", resp.StatusCode)
		}
		if n := total(); n != 0 {
			t.Fatalf("rejected deliveries recorded %d rows", n)
		}

		// Enqueue fails: 503, nothing recorded; the sender's retry is processed.
		e.fail.Store(true)
		if status, _ := e.post(t, h, body); status != http.StatusServiceUnavailable {
			t.Fatalf("enqueue failure: %d", status)
		}
		if n := total(); n != 0 {
			t.Fatalf("failed delivery recorded %d rows", n)
		}
		e.fail.Store(false)
		if status, _ := e.post(t, h, body); status != http.StatusAccepted {
			t.Fatalf("retry after failure: %d", status)
		}
		// Same id, different (authentic) body: 422, nothing enqueued.
		if status, _ := e.post(t, e.signed(t, "msg_1", `{"n":99}`), `{"n":99}`); status != http.StatusUnprocessableEntity {
			t.Fatalf("same id, other body: %d", status)
		}
		if e.jobs(t, "msg_1") != 1 || e.receipts(t, "msg_1") != 1 {
			t.Fatalf("jobs=%d receipts=%d", e.jobs(t, "msg_1"), e.receipts(t, "msg_1"))
		}
		if n := e.seen.conflicts.Load(); n != 1 {
			t.Errorf("observed %d fingerprint conflicts, want 1", n)
		}
	})
}

// GitHub and Stripe receivers take the delivery id from their own places.
func TestReceiverSchemes(t *testing.T) {
	t.Parallel()
	d := testdb.SQLite(t)
	ib, _ := inbox.New(d, inbox.Config{})
	gh, _ := webhook.NewGitHub("gh-secret")
	st, _ := webhook.NewStripe(webhook.StripeConfig{Secrets: []string{"whsec_st"}})
	var mu sync.Mutex
	var got []webhook.Delivery
	enqueue := func(_ context.Context, _ *sql.Tx, del webhook.Delivery, _ []byte) error {
		mu.Lock()
		got = append(got, del)
		mu.Unlock()
		return nil
	}
	for _, c := range []struct {
		source string
		v      webhook.Verifier
		s      webhook.Signer
		del    webhook.Delivery
		body   string
		wantID string
	}{
		{"github", gh, gh, webhook.Delivery{ID: "72d3162e-cc78-11e3-81ab-4c9367dc0958", Event: "push"}, `{"ref":"main"}`, "72d3162e-cc78-11e3-81ab-4c9367dc0958"},
		{"stripe", st, st, webhook.Delivery{Timestamp: time.Now()}, `{"id":"evt_9","type":"charge.succeeded"}`, "evt_9"},
	} {
		rc, err := webhook.NewReceiver(ib, webhook.ReceiverConfig[*sql.Tx]{Source: c.source, Verifier: c.v, EnqueueTx: enqueue})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			h := http.Header{}
			_ = c.s.Sign(h, c.del, []byte(c.body))
			req := httptest.NewRequest(http.MethodPost, "/hooks/"+c.source, bytes.NewReader([]byte(c.body)))
			req.Header = h
			rec := httptest.NewRecorder()
			rc.ServeHTTP(rec, req)
			want := http.StatusOK
			if i == 0 {
				want = http.StatusAccepted
			}
			if rec.Code != want {
				t.Fatalf("%s delivery %d: %d %s", c.source, i, rec.Code, rec.Body)
			}
		}
		if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("inbox")+` WHERE consumer = $1 AND message_id = $2`, "webhook:"+c.source, c.wantID); n != 1 {
			t.Fatalf("%s receipts = %d", c.source, n)
		}
	}
	if len(got) != 2 || got[0].Event != "push" || got[1].Event != "charge.succeeded" || got[1].Source != "stripe" {
		t.Fatalf("enqueued %+v", got)
	}
	if _, err := webhook.NewReceiver(ib, webhook.ReceiverConfig[*sql.Tx]{Verifier: gh, EnqueueTx: enqueue}); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("no source: %v", err)
	}
	if _, err := webhook.NewReceiver(ib, webhook.ReceiverConfig[*sql.Tx]{Source: "x", EnqueueTx: enqueue}); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("no verifier: %v", err)
	}
}
