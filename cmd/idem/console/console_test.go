package console_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/console"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
)

const token = "test-token-0123456789abcdef"

// recorder is a broker.Publisher that keeps what it was given.
type recorder struct {
	mu   sync.Mutex
	msgs []idem.Message
	err  error
}

func (p *recorder) Publish(_ context.Context, msgs ...idem.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	p.msgs = append(p.msgs, msgs...)
	return nil
}

func (p *recorder) Close() error { return nil }

func (p *recorder) published() []idem.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]idem.Message(nil), p.msgs...)
}

// harness is a console on one database, with the library handles a test
// needs, independent of the driver's transaction type.
type harness struct {
	t       *testing.T
	h       http.Handler
	pub     *recorder
	park    func(l dlq.Letter) int64
	letter  func(id int64) dlq.Letter
	exec    func(sql string, args ...any)
	count   func(sql string, args ...any) int
	table   func(string) string
	effects func(key string) effect.Effect
	lookup  func(tenant, op, key string) (*idemhttp.Record, error)
	enqueue func(evs ...outbox.Event) []outbox.Event
	audit   func(f console.AuditFilter) []console.AuditEntry
}

func newHarness[TTx any](t *testing.T, d store.Driver[TTx], cfg console.Config) *harness {
	t.Helper()
	ctx := context.Background()
	pub := &recorder{}
	cfg.Token = token
	if cfg.Publisher == nil {
		cfg.Publisher = pub
	}
	c, err := console.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := dlq.New(d, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := effect.New(d, effect.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(d, outbox.Config{Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{
		t: t, h: c.Handler(), pub: pub,
		park: func(l dlq.Letter) int64 {
			id, err := ds.Park(ctx, l)
			if err != nil {
				t.Fatal(err)
			}
			return id
		},
		letter: func(id int64) dlq.Letter {
			l, err := ds.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		exec:  func(sql string, args ...any) { testdb.Exec(t, d, sql, args...) },
		count: func(sql string, args ...any) int { return testdb.Count(t, d, sql, args...) },
		table: d.Table,
		effects: func(key string) effect.Effect {
			e, err := ledger.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			return e
		},
		lookup: func(tenant, op, key string) (*idemhttp.Record, error) {
			return idemhttp.Lookup(ctx, d, tenant, op, key)
		},
		enqueue: func(evs ...outbox.Event) []outbox.Event {
			var out []outbox.Event
			err := store.InTx(ctx, d, func(tx TTx) error {
				var err error
				out, err = ob.EnqueueTx(ctx, tx, evs...)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return out
		},
		audit: func(f console.AuditFilter) []console.AuditEntry {
			es, err := console.ListAudit(ctx, d, f)
			if err != nil {
				t.Fatal(err)
			}
			return es
		},
	}
}

// eachDB runs fn on every driver (testdb.EachDriver: SQLite, and
// PostgreSQL through pgx and through database/sql, those skipped without
// IDEM_TEST_POSTGRES_URL).
func eachDB(t *testing.T, cfg console.Config, fn func(t *testing.T, h *harness)) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { fn(t, newHarness(t, e.D, cfg)) })
}

// req is one request to the console.
type req struct {
	method, path string
	form         url.Values
	bearer       string
	header       map[string]string
}

type resp struct {
	status int
	body   string
	header http.Header
}

func (h *harness) do(r req) resp {
	h.t.Helper()
	var body io.Reader
	if r.form != nil {
		body = strings.NewReader(r.form.Encode())
	}
	hr := httptest.NewRequest(r.method, "http://console.test"+r.path, body)
	if r.form != nil {
		hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if r.bearer != "" {
		hr.Header.Set("Authorization", "Bearer "+r.bearer)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, hr)
	return resp{w.Code, w.Body.String(), w.Header()}
}

// get is an authenticated GET that must answer 200.
func (h *harness) get(path string) string {
	h.t.Helper()
	r := h.do(req{method: "GET", path: path, bearer: token})
	if r.status != http.StatusOK {
		h.t.Fatalf("GET %s: %d\n%s", path, r.status, r.body)
	}
	return r.body
}

// post is an authenticated same-origin POST; it returns the response.
func (h *harness) post(path string, form url.Values) resp {
	h.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	return h.do(req{method: "POST", path: path, form: form, bearer: token,
		header: map[string]string{"Sec-Fetch-Site": "same-origin", "Idem-Operator": "alice"}})
}

func letter(consumer, subject, id string, payload string) dlq.Letter {
	return dlq.Letter{Consumer: consumer, Source: subject, Position: "7", MessageID: id,
		Headers: map[string]string{"ce-id": id, "ce-type": "OrderConfirmed"}, Payload: []byte(payload),
		Error: "invalid input: bad order", ErrorClass: "invalid_input", Attempts: 1}
}

func TestNoTokenChangesNothing(t *testing.T) {
	eachDB(t, console.Config{}, func(t *testing.T, h *harness) {
		id := h.park(letter("billing", "orders", "m-1", `{"a":1}`))
		path := fmt.Sprintf("/console/dlq/%d/discard", id)
		for name, r := range map[string]req{
			"no token":     {method: "POST", path: path, form: url.Values{}},
			"wrong bearer": {method: "POST", path: path, form: url.Values{}, bearer: "nope"},
			"forged cookie": {method: "POST", path: path, form: url.Values{},
				header: map[string]string{"Cookie": "idem_console=YWxpY2U.99999999999.forged"}},
			"redrive no token": {method: "POST", path: fmt.Sprintf("/console/dlq/%d/redrive", id), form: url.Values{}},
			"bulk no token": {method: "POST", path: "/console/dlq/bulk",
				form: url.Values{"action": {"discard"}, "max_id": {"999"}}},
		} {
			if got := h.do(r); got.status != http.StatusUnauthorized {
				t.Errorf("%s: status %d, want 401", name, got.status)
			}
		}
		if l := h.letter(id); l.State != dlq.Parked {
			t.Fatalf("letter is %s after unauthenticated requests, want parked", l.State)
		}
		if n := len(h.pub.published()); n != 0 {
			t.Fatalf("%d messages published without a token", n)
		}
		if n := h.count(`SELECT count(*) FROM ` + h.table("audit_log")); n != 0 {
			t.Fatalf("%d audit rows after refused requests", n)
		}
		// A browser page without the cookie goes to the login form.
		r := h.do(req{method: "GET", path: "/console/dlq"})
		if r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/console/login?next=") {
			t.Fatalf("GET without token: %d Location %q, want 303 to the login page", r.status, r.header.Get("Location"))
		}
		if strings.Contains(r.body, "m-1") {
			t.Fatal("the redirect shows letter data")
		}
	})
}

func TestForeignOriginChangesNothing(t *testing.T) {
	eachDB(t, console.Config{}, func(t *testing.T, h *harness) {
		id := h.park(letter("billing", "orders", "m-1", `{"a":1}`))
		for name, hd := range map[string]map[string]string{
			"origin":         {"Origin": "https://evil.example"},
			"sec-fetch-site": {"Sec-Fetch-Site": "cross-site"},
		} {
			for _, path := range []string{fmt.Sprintf("/console/dlq/%d/discard", id), fmt.Sprintf("/console/dlq/%d/redrive", id)} {
				r := h.do(req{method: "POST", path: path, form: url.Values{}, bearer: token, header: hd})
				if r.status != http.StatusForbidden {
					t.Errorf("%s %s: status %d, want 403", name, path, r.status)
				}
			}
		}
		// The login form is protected too (login CSRF).
		r := h.do(req{method: "POST", path: "/console/login", form: url.Values{"name": {"x"}, "token": {token}},
			header: map[string]string{"Origin": "https://evil.example"}})
		if r.status != http.StatusForbidden || r.header.Get("Set-Cookie") != "" {
			t.Errorf("cross-origin login: %d, cookie %q", r.status, r.header.Get("Set-Cookie"))
		}
		if l := h.letter(id); l.State != dlq.Parked {
			t.Fatalf("letter is %s after cross-origin requests, want parked", l.State)
		}
		if n := len(h.pub.published()); n != 0 {
			t.Fatalf("%d messages published cross-origin", n)
		}
		// The same request from the console's own origin works.
		if r := h.do(req{method: "POST", path: fmt.Sprintf("/console/dlq/%d/discard", id), form: url.Values{}, bearer: token,
			header: map[string]string{"Origin": "http://console.test"}}); r.status != http.StatusSeeOther {
			t.Fatalf("same-origin discard: %d\n%s", r.status, r.body)
		}
		if l := h.letter(id); l.State != dlq.Discarded {
			t.Fatalf("letter is %s, want discarded", l.State)
		}
	})
}

func TestReadOnlyChangesNothing(t *testing.T) {
	eachDB(t, console.Config{ReadOnly: true}, func(t *testing.T, h *harness) {
		id := h.park(letter("billing", "orders", "m-1", `{"a":1}`))
		if r := h.post(fmt.Sprintf("/console/dlq/%d/discard", id), nil); r.status != http.StatusForbidden {
			t.Fatalf("read-only discard: %d, want 403", r.status)
		}
		if l := h.letter(id); l.State != dlq.Parked {
			t.Fatalf("letter is %s, want parked", l.State)
		}
		page := h.get(fmt.Sprintf("/console/dlq/%d", id))
		if strings.Contains(page, `data-testid="dlq-discard"`) || strings.Contains(page, `data-testid="dlq-redrive"`) {
			t.Fatal("read-only letter page shows action buttons")
		}
	})
}

func TestLoginSetsCookie(t *testing.T) {
	eachDB(t, console.Config{}, func(t *testing.T, h *harness) {
		same := map[string]string{"Sec-Fetch-Site": "same-origin"}
		bad := h.do(req{method: "POST", path: "/console/login", form: url.Values{"name": {"ana"}, "token": {"wrong"}}, header: same})
		if bad.status != http.StatusUnauthorized || bad.header.Get("Set-Cookie") != "" {
			t.Fatalf("wrong token: %d cookie %q", bad.status, bad.header.Get("Set-Cookie"))
		}
		r := h.do(req{method: "POST", path: "/console/login",
			form: url.Values{"name": {"ana"}, "token": {token}, "next": {"//evil.example/x"}}, header: same})
		if r.status != http.StatusSeeOther || r.header.Get("Location") != "/console/" {
			t.Fatalf("login: %d Location %q, want 303 to /console/ (never off-site)", r.status, r.header.Get("Location"))
		}
		ck := r.header.Get("Set-Cookie")
		for _, attr := range []string{"idem_console=", "HttpOnly", "SameSite=Strict", "Path=/console/"} {
			if !strings.Contains(ck, attr) {
				t.Fatalf("cookie %q lacks %s", ck, attr)
			}
		}
		cookie := strings.SplitN(ck, ";", 2)[0]
		page := h.do(req{method: "GET", path: "/console/", header: map[string]string{"Cookie": cookie}})
		if page.status != http.StatusOK || !strings.Contains(page.body, "ana") {
			t.Fatalf("overview with cookie: %d", page.status)
		}
		if strings.Contains(page.body, token) {
			t.Fatal("a page shows the token")
		}
		// Actions with the cookie are recorded under the login name.
		id := h.park(letter("billing", "orders", "m-1", `{}`))
		if r := h.do(req{method: "POST", path: fmt.Sprintf("/console/dlq/%d/discard", id), form: url.Values{"reason": {"dup"}},
			header: map[string]string{"Cookie": cookie, "Sec-Fetch-Site": "same-origin"}}); r.status != http.StatusSeeOther {
			t.Fatalf("discard with cookie: %d %s", r.status, r.body)
		}
		es := h.audit(console.AuditFilter{})
		if len(es) != 1 || es[0].Actor != "ana" || es[0].Action != "dlq.discard" || es[0].Reason != "dup" || es[0].Outcome != "ok" {
			t.Fatalf("audit = %+v", es)
		}
	})
}

func TestHostilePayloadIsEscaped(t *testing.T) {
	eachDB(t, console.Config{}, func(t *testing.T, h *harness) {
		l := letter(`<img src=x onerror=alert(1)>`, "orders\x1b[2J", "m-<b>1</b>", `{"note":"<script>alert(1)</script>"}`)
		l.Error = "boom \x1b[31mred\x1b[0m </td><script>alert(2)</script>"
		l.Headers["X-Evil"] = `"><script>alert(3)</script>`
		l.Headers["Authorization"] = "Bearer s3cr3t-value"
		id := h.park(l)
		raw := letter("c", "s", "m-raw", "plain <script>alert(4)</script> \x1b]0;title\x07")
		rawID := h.park(raw)
		for _, path := range []string{"/console/dlq", fmt.Sprintf("/console/dlq/%d", id), fmt.Sprintf("/console/dlq/%d", rawID),
			"/console/", "/console/dlq?q=%3Cscript%3E"} {
			body := h.get(path)
			for _, bad := range []string{"<script>alert", "<img src=x", "\x1b", "\x07", "<b>1</b>", "s3cr3t-value"} {
				if strings.Contains(body, bad) {
					t.Errorf("%s contains %q unescaped", path, bad)
				}
			}
		}
		page := h.get(fmt.Sprintf("/console/dlq/%d", id))
		for _, want := range []string{"&lt;script&gt;alert(2)&lt;/script&gt;", `\x1b[31m`, "&lt;img src=x", "(hidden)"} {
			if !strings.Contains(page, want) {
				t.Errorf("letter page lacks %q", want)
			}
		}
	})
}

func TestRedriveDiscardAndRevise(t *testing.T) {
	eachDB(t, console.Config{}, func(t *testing.T, h *harness) {
		a := h.park(letter("billing", "orders", "m-a", `{"n":1}`))
		b := h.park(letter("billing", "orders", "m-b", `{"n":2}`))
		c := h.park(letter("billing", "orders", "m-c", `{"n":"bad"}`))

		if r := h.post(fmt.Sprintf("/console/dlq/%d/redrive", a), url.Values{"reason": {"fixed the bug"}}); r.status != http.StatusSeeOther {
			t.Fatalf("redrive: %d %s", r.status, r.body)
		}
		msgs := h.pub.published()
		if len(msgs) != 1 || msgs[0].ID != "m-a" {
			t.Fatalf("published %+v, want m-a once", msgs)
		}
		if l := h.letter(a); l.State != dlq.Redriven || l.ResolvedBy != "alice" {
			t.Fatalf("letter a: %s by %q", l.State, l.ResolvedBy)
		}
		// A second redrive of the same letter is refused and publishes nothing.
		if r := h.post(fmt.Sprintf("/console/dlq/%d/redrive", a), nil); r.status != http.StatusConflict {
			t.Fatalf("second redrive: %d, want 409", r.status)
		}
		if r := h.post(fmt.Sprintf("/console/dlq/%d/discard", b), nil); r.status != http.StatusSeeOther {
			t.Fatalf("discard: %d", r.status)
		}
		if l := h.letter(b); l.State != dlq.Discarded {
			t.Fatalf("letter b: %s", l.State)
		}

		// Edit and redrive: a new message id, linked, and the original resolved.
		if r := h.post(fmt.Sprintf("/console/dlq/%d/revise", c), url.Values{"payload": {"{not json"}}); r.status != http.StatusBadRequest {
			t.Fatalf("revise with broken JSON: %d, want 400", r.status)
		}
		if r := h.post(fmt.Sprintf("/console/dlq/%d/revise", c), url.Values{"payload": {"{\r\n  \"n\": 3\r\n}"}, "reason": {"typo"}}); r.status != http.StatusSeeOther {
			t.Fatalf("revise: %d %s", r.status, r.body)
		}
		msgs = h.pub.published()
		if len(msgs) != 2 {
			t.Fatalf("%d messages published, want 2", len(msgs))
		}
		rev := msgs[1]
		if rev.ID == "m-c" || rev.ID == "" || rev.Headers[dlq.HeaderRevisionOf] != "m-c" || rev.Headers["ce-id"] != rev.ID {
			t.Fatalf("revision id %q headers %v", rev.ID, rev.Headers)
		}
		if string(rev.Payload) != "{\n  \"n\": 3\n}" || rev.Subject != "orders" {
			t.Fatalf("revision payload %q subject %q", rev.Payload, rev.Subject)
		}
		if l := h.letter(c); l.State != dlq.Discarded || l.ResolvedBy != "alice" {
			t.Fatalf("original after revise: %s by %q", l.State, l.ResolvedBy)
		}
		if page := h.get(fmt.Sprintf("/console/dlq/%d", c)); !strings.Contains(page, `data-testid="letter-revised"`) || !strings.Contains(page, rev.ID) {
			t.Fatal("the revised letter's page does not name its revision")
		}
		// The original can no longer be redriven: only the revision is out.
		if r := h.post(fmt.Sprintf("/console/dlq/%d/redrive", c), nil); r.status != http.StatusConflict {
			t.Fatalf("redrive of a revised letter: %d, want 409", r.status)
		}
		if n := len(h.pub.published()); n != 2 {
			t.Fatalf("%d messages published, want 2", n)
		}
		// Every action is in the audit log, newest first.
		es := h.audit(console.AuditFilter{Action: "dlq."})
		var got []string
		for _, e := range es {
			got = append(got, e.Action+":"+strings.SplitN(e.Outcome, ":", 2)[0])
		}
		// (The revise with broken JSON was refused before it began: not an action.)
		want := "dlq.redrive:failed dlq.revise:ok dlq.discard:ok dlq.redrive:failed dlq.redrive:ok"
		if strings.Join(got, " ") != want {
			t.Fatalf("audit actions\n got %s\nwant %s", strings.Join(got, " "), want)
		}
		if !strings.Contains(es[1].Details, rev.ID) || es[4].Reason != "fixed the bug" || es[4].Actor != "alice" {
			t.Fatalf("audit details: %+v", es)
		}
		page := h.get("/console/audit")
		if n := strings.Count(page, `data-testid="audit-row"`); n != 5 {
			t.Fatalf("audit page shows %d rows, want 5", n)
		}
	})
}

func TestRedriveFailureKeepsLetterParked(t *testing.T) {
	eachDB(t, console.Config{}, func(t *testing.T, h *harness) {
		id := h.park(letter("billing", "orders", "m-a", `{"n":1}`))
		h.pub.err = fmt.Errorf("broker down")
		for _, path := range []string{"redrive", "revise"} {
			r := h.post(fmt.Sprintf("/console/dlq/%d/%s", id, path), url.Values{"payload": {`{"n":2}`}})
			if r.status != http.StatusInternalServerError || !strings.Contains(r.body, "broker down") {
				t.Fatalf("%s with the broker down: %d", path, r.status)
			}
		}
		if l := h.letter(id); l.State != dlq.Parked {
			t.Fatalf("letter is %s after failed publishes, want parked", l.State)
		}
	})
}

// TestARevisionThatMayBeOutIsShownAndNotRedriven: a revision whose
// publish failed may be out; the letter page says so and disables Redrive,
// a redrive posted anyway is refused (409, also forced), and publishing the
// revision again resolves the letter.
func TestARevisionThatMayBeOutIsShownAndNotRedriven(t *testing.T) {
	eachDB(t, console.Config{}, func(t *testing.T, h *harness) {
		id := h.park(letter("billing", "orders", "m-out", `{"n":1}`))
		h.pub.err = fmt.Errorf("publish timed out")
		path := func(verb string) string { return fmt.Sprintf("/console/dlq/%d/%s", id, verb) }
		if r := h.post(path("revise"), url.Values{"payload": {`{"n":2}`}}); r.status != http.StatusInternalServerError {
			t.Fatalf("revise with the publish failing: %d", r.status)
		}
		h.pub.err = nil
		l := h.letter(id)
		if l.State != dlq.Parked || l.RevisionID == "" {
			t.Fatalf("letter %s with revision %q, want parked with its revision", l.State, l.RevisionID)
		}
		page := h.get(fmt.Sprintf("/console/dlq/%d", id))
		if !strings.Contains(page, `data-testid="letter-revision"`) || !strings.Contains(page, l.RevisionID) || !strings.Contains(page, "may be out") {
			t.Fatal("the letter page does not show the revision that may be out")
		}
		if !strings.Contains(page, "&#34;n&#34;: 2") {
			t.Fatal("the revise form is not filled with the recorded revision's payload")
		}
		if !strings.Contains(page, `title="a revision of this letter may be out"`) {
			t.Fatal("Redrive is not disabled on a letter whose revision may be out")
		}
		for _, form := range []url.Values{{}, {"force": {"1"}, "reason": {"the customer asked"}}} {
			if r := h.post(path("redrive"), form); r.status != http.StatusConflict || !strings.Contains(r.body, "may be out") {
				t.Fatalf("redrive (%v): %d %s, want 409", form, r.status, r.body)
			}
		}
		if n := len(h.pub.published()); n != 0 {
			t.Fatalf("%d published, want none", n)
		}
		if r := h.post(path("revise"), url.Values{"payload": {"{\n  \"n\": 2\n}"}}); r.status != http.StatusSeeOther {
			t.Fatalf("revise again: %d %s", r.status, r.body)
		}
		if l := h.letter(id); l.State != dlq.Discarded || len(h.pub.published()) != 1 || h.pub.published()[0].ID != l.RevisionID {
			t.Fatalf("letter %s after its revision, %d published", l.State, len(h.pub.published()))
		}
	})
}

func TestBulkActsOnEveryMatchingLetter(t *testing.T) {
	eachDB(t, console.Config{}, func(t *testing.T, h *harness) {
		for i := range 10 {
			h.park(letter("search", "orders", fmt.Sprintf("s-%d", i), `{"kind":"stale"}`))
		}
		h.park(letter("search", "other", "s-other", `{"kind":"stale"}`))
		h.park(letter("billing", "orders", "b-1", `{"kind":"stale"}`))
		h.park(letter("search", "orders", "s-fresh", `{"kind":"fresh"}`))

		list := h.get("/console/dlq?consumer=search&subject=orders&q=stale")
		if n := strings.Count(list, `data-testid="dlq-row"`); n != 10 {
			t.Fatalf("filtered list shows %d rows, want 10", n)
		}
		confirm := h.get("/console/dlq/bulk?action=discard&consumer=search&subject=orders&q=stale")
		if !strings.Contains(confirm, `data-testid="dlq-bulk-count">10<`) {
			t.Fatalf("confirmation page does not show the count 10:\n%s", confirm)
		}
		// A letter parked after the count was shown is left alone.
		var maxID string
		if i := strings.Index(confirm, `name="max_id" value="`); i >= 0 {
			maxID = strings.SplitN(confirm[i+len(`name="max_id" value="`):], `"`, 2)[0]
		}
		late := h.park(letter("search", "orders", "s-late", `{"kind":"stale"}`))
		r := h.post("/console/dlq/bulk", url.Values{"action": {"discard"}, "consumer": {"search"}, "subject": {"orders"},
			"q": {"stale"}, "max_id": {maxID}, "count": {"10"}, "reason": {"stale projections"}})
		if r.status != http.StatusSeeOther || !strings.Contains(r.header.Get("Location"), "n=10") {
			t.Fatalf("bulk discard: %d %q %s", r.status, r.header.Get("Location"), r.body)
		}
		if n := h.count(`SELECT count(*) FROM ` + h.table("dead_letters") + ` WHERE state = 'discarded'`); n != 10 {
			t.Fatalf("%d letters discarded, want 10", n)
		}
		if l := h.letter(late); l.State != dlq.Parked {
			t.Fatalf("late letter is %s, want parked", l.State)
		}
		es := h.audit(console.AuditFilter{Action: "dlq.bulk-discard"})
		if len(es) != 1 || es[0].Outcome != "ok" || !strings.Contains(es[0].Details, "discard 10") || es[0].Reason != "stale projections" {
			t.Fatalf("audit = %+v", es)
		}
		// Bulk redrive of what is left for consumer search on orders.
		h.post("/console/dlq/bulk", url.Values{"action": {"redrive"}, "consumer": {"search"}, "max_id": {"999999"}})
		if n := len(h.pub.published()); n != 3 { // s-other, s-fresh, s-late
			t.Fatalf("bulk redrive published %d, want 3", n)
		}
	})
}

func TestHeldWork(t *testing.T) {
	eachDB(t, console.Config{}, func(t *testing.T, h *harness) {
		past := store.Micros(time.Now().Add(-time.Hour))
		now := store.Micros(time.Now())
		insertEffect := func(key, state string, lease int64) {
			h.exec(`INSERT INTO `+h.table("effects")+` (effect_key, kind, payload, fingerprint, state, attempts, token, lease_until,
 next_attempt_at, last_error, created_at, updated_at) VALUES ($1, 'email', $2, $3, $4, 1, 1, $5, $5, 'provider timeout', $6, $6)`,
				key, []byte(`{"to":"a@example.com"}`), []byte("fp"), state, lease, now)
		}
		insertEffect("held-1", "in_progress", past)
		insertEffect("held-2", "in_progress", past)
		insertEffect("live-1", "in_progress", store.Micros(time.Now().Add(time.Hour)))
		insertKey := func(key string) {
			h.exec(`INSERT INTO `+h.table("idempotency_keys")+` (tenant, operation, idem_key, fingerprint, state, token, created_at, expires_at)
 VALUES ('acme', 'POST /orders', $1, $2, 'failed', 2, $3, $4)`, key, make([]byte, 32), now, store.Micros(time.Now().Add(time.Hour)))
		}
		insertKey("k-1")
		insertKey("k-2")

		page := h.get("/console/held")
		if n := strings.Count(page, `data-testid="held-row"`); n != 4 {
			t.Fatalf("held page shows %d rows, want 4 (the live effect is not held)", n)
		}
		// A reason is required; without one nothing changes.
		if r := h.post("/console/held/effect/release", url.Values{"key": {"held-1"}}); r.status != http.StatusBadRequest {
			t.Fatalf("release without a reason: %d, want 400", r.status)
		}
		if e := h.effects("held-1"); e.State != effect.InProgress {
			t.Fatalf("effect after refused release: %s", e.State)
		}
		if r := h.post("/console/held/effect/release", url.Values{"key": {"held-1"}, "reason": {"provider has no record"}}); r.status != http.StatusSeeOther {
			t.Fatalf("release: %d %s", r.status, r.body)
		}
		if e := h.effects("held-1"); e.State != effect.Pending {
			t.Fatalf("released effect is %s, want pending", e.State)
		}
		if r := h.post("/console/held/effect/resolve", url.Values{"key": {"held-2"}, "result": {`{"id":"em_1"}`}, "reason": {"provider shows it sent"}}); r.status != http.StatusSeeOther {
			t.Fatalf("resolve: %d %s", r.status, r.body)
		}
		if e := h.effects("held-2"); e.State != effect.Completed || string(e.Result) != `{"id":"em_1"}` {
			t.Fatalf("resolved effect: %s %q", e.State, e.Result)
		}
		if r := h.post("/console/held/effect/release", url.Values{"key": {"live-1"}, "reason": {"x"}}); r.status != http.StatusConflict {
			t.Fatalf("release of a live effect: %d, want 409", r.status)
		}

		if r := h.post("/console/held/key/release", url.Values{"tenant": {"acme"}, "operation": {"POST /orders"}, "key": {"k-1"}, "reason": {"never ran"}}); r.status != http.StatusSeeOther {
			t.Fatalf("key release: %d %s", r.status, r.body)
		}
		if _, err := h.lookup("acme", "POST /orders", "k-1"); err == nil {
			t.Fatal("released key still stored")
		}
		if r := h.post("/console/held/key/resolve", url.Values{"tenant": {"acme"}, "operation": {"POST /orders"}, "key": {"k-2"},
			"status": {"201"}, "content_type": {"application/json"}, "body": {`{"order_id":"o-1"}`}, "reason": {"order exists"}}); r.status != http.StatusSeeOther {
			t.Fatalf("key resolve: %d %s", r.status, r.body)
		}
		rec, err := h.lookup("acme", "POST /orders", "k-2")
		if err != nil || rec.State != idemhttp.StateCompleted || rec.Status != 201 || string(rec.Body) != `{"order_id":"o-1"}` {
			t.Fatalf("resolved key: %+v %v", rec, err)
		}
		if got := h.get("/console/held"); strings.Count(got, `data-testid="held-row"`) != 0 {
			t.Fatal("held page still shows rows after every item was handled")
		}
		es := h.audit(console.AuditFilter{Action: "held."})
		if len(es) != 5 || es[0].Action != "held.key.resolve" || es[0].Reason != "order exists" {
			t.Fatalf("audit = %+v", es)
		}
	})
}

func TestKeyLookupAndForget(t *testing.T) {
	eachDB(t, console.Config{}, func(t *testing.T, h *harness) {
		now := store.Micros(time.Now())
		h.exec(`INSERT INTO `+h.table("idempotency_keys")+` (tenant, operation, idem_key, fingerprint, state, token, status, headers, body,
 created_at, completed_at, expires_at) VALUES ('acme', 'POST /orders', 'order-1', $1, 'completed', 1, 201, $2, $3, $4, $4, $5)`,
			make([]byte, 32), `{"Content-Type":["application/json"],"Set-Cookie":["sid=secret"]}`,
			[]byte(`{"order_id":"<script>x</script>"}`), now, store.Micros(time.Now().Add(time.Hour)))
		page := h.get("/console/keys?tenant=acme&operation=POST+%2Forders&key=order-1")
		if !strings.Contains(page, `data-testid="key-result"`) || !strings.Contains(page, `data-testid="key-status">201<`) ||
			!strings.Contains(page, "&lt;script&gt;x&lt;/script&gt;") || strings.Contains(page, "sid=secret") {
			t.Fatalf("lookup page:\n%s", page)
		}
		missing := h.do(req{method: "GET", path: "/console/keys?tenant=acme&operation=POST+%2Forders&key=nope", bearer: token})
		if missing.status != http.StatusNotFound || !strings.Contains(missing.body, `data-testid="key-result"`) {
			t.Fatalf("missing key: %d", missing.status)
		}
		if r := h.post("/console/keys/forget", url.Values{"tenant": {"acme"}, "operation": {"POST /orders"}, "key": {"order-1"}}); r.status != http.StatusBadRequest {
			t.Fatalf("forget without a reason: %d", r.status)
		}
		if r := h.post("/console/keys/forget", url.Values{"tenant": {"acme"}, "operation": {"POST /orders"}, "key": {"order-1"}, "reason": {"customer asked to retry"}}); r.status != http.StatusSeeOther {
			t.Fatalf("forget: %d", r.status)
		}
		if _, err := h.lookup("acme", "POST /orders", "order-1"); err == nil {
			t.Fatal("forgotten key still stored")
		}
	})
}

func TestOutboxParkedEvents(t *testing.T) {
	eachDB(t, console.Config{}, func(t *testing.T, h *harness) {
		evs := h.enqueue(
			outbox.Event{Type: "OrderConfirmed", Topic: "orders", Key: "order-1", Payload: []byte(`{"n":1}`)},
			outbox.Event{Type: "OrderConfirmed", Topic: "orders", Key: "order-1", Payload: []byte(`{"n":2}`)},
			outbox.Event{Type: "OrderConfirmed", Topic: "orders", Key: "order-1", Payload: []byte(`{"n":3}`)},
			outbox.Event{Type: "OrderConfirmed", Topic: "orders", Key: "order-2", Payload: []byte(`{"n":4}`)},
		)
		park := func(seq int64) {
			h.exec(`UPDATE `+h.table("outbox")+` SET state = 'failed', attempts = 5, last_error = 'broker said <no>' WHERE seq = $1`, seq)
		}
		park(evs[0].Seq)
		park(evs[3].Seq)
		page := h.get("/console/outbox")
		if n := strings.Count(page, `data-testid="outbox-row"`); n != 2 {
			t.Fatalf("outbox page shows %d parked events, want 2", n)
		}
		if !strings.Contains(page, "<strong>2</strong> later event(s)") || !strings.Contains(page, "broker said &lt;no&gt;") ||
			!strings.Contains(page, `data-testid="outbox-lag"`) {
			t.Fatalf("outbox page lacks the blocked count, the error or the lag:\n%s", page)
		}
		// What waits behind each parked event (one statement for the page):
		// order-1's two later events by seq, nothing behind order-2's.
		for _, want := range []string{fmt.Sprintf("<code>seq %d OrderConfirmed</code>", evs[1].Seq),
			fmt.Sprintf("<code>seq %d OrderConfirmed</code>", evs[2].Seq), "Nothing waits behind it."} {
			if !strings.Contains(page, want) {
				t.Fatalf("outbox page lacks %q:\n%s", want, page)
			}
		}
		if r := h.post(fmt.Sprintf("/console/outbox/%d/discard", evs[0].Seq), url.Values{"reason": {"superseded"}}); r.status != http.StatusSeeOther {
			t.Fatalf("discard: %d %s", r.status, r.body)
		}
		if n := h.count(`SELECT count(*) FROM `+h.table("outbox")+` WHERE seq = $1`, evs[0].Seq); n != 0 {
			t.Fatal("discarded event still in the outbox")
		}
		if r := h.post(fmt.Sprintf("/console/outbox/%d/discard", evs[1].Seq), nil); r.status != http.StatusConflict {
			t.Fatalf("discard of a pending event: %d, want 409", r.status)
		}
		if r := h.post(fmt.Sprintf("/console/outbox/%d/retry", evs[3].Seq), nil); r.status != http.StatusSeeOther {
			t.Fatalf("retry: %d", r.status)
		}
		if n := h.count(`SELECT count(*) FROM `+h.table("outbox")+` WHERE seq = $1 AND state = 'pending'`, evs[3].Seq); n != 1 {
			t.Fatal("retried event is not pending")
		}
		es := h.audit(console.AuditFilter{Action: "outbox."})
		if len(es) != 3 || !strings.Contains(es[2].Details, `{"n":1}`) {
			t.Fatalf("audit = %+v", es)
		}
	})
}

func TestNewRefusesAShortToken(t *testing.T) {
	t.Parallel()
	for _, tok := range []string{"", "short"} {
		if _, err := console.New(testdb.SQLite(t), console.Config{Token: tok}); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("token %q: %v, want ErrInvalidOption", tok, err)
		}
	}
}

func TestOverviewCounts(t *testing.T) {
	eachDB(t, console.Config{}, func(t *testing.T, h *harness) {
		for i := range 3 {
			h.park(letter("billing", "orders", fmt.Sprintf("m-%d", i), `{}`))
		}
		h.exec(`INSERT INTO `+h.table("inbox")+` (consumer, message_id, fingerprint, state, received_at, expires_at) VALUES ('billing', 'in-1', $1, 'in_progress', 1, $2)`,
			[]byte("fp"), store.Micros(time.Now().Add(time.Hour)))
		page := h.get("/console/")
		for _, want := range []string{"inbox (by state)", "<td>in_progress</td>", `data-testid="dlq-count">3<`, `data-testid="outbox-lag"`, `data-testid="chart-dlq"`, "<svg", "billing"} {
			if !strings.Contains(page, want) {
				t.Errorf("overview lacks %q", want)
			}
		}
		h.park(dlq.Letter{Consumer: "billing", MessageID: "dup", Payload: []byte(`{}`), ErrorClass: "fingerprint_mismatch"})
		if page := h.get("/console/"); !strings.Contains(page, `data-testid="conflict-letters">1 dead-lettered`) {
			t.Error("overview does not count the dead-lettered fingerprint conflicts")
		}
		if strings.Contains(page, `data-testid="duplicates">0<`) {
			t.Error("duplicates shown as 0 without a gatherer; want n/a")
		}
	})
}

func TestInstalled(t *testing.T) {
	t.Parallel()
	d := testdb.SQLite(t)
	if ok, err := console.Installed(context.Background(), d); err != nil || !ok {
		t.Fatalf("migrated database: Installed = %v, %v", ok, err)
	}
	testdb.Exec(t, d, `DROP TABLE `+d.Table("audit_log"))
	if ok, err := console.Installed(context.Background(), d); err != nil || ok {
		t.Fatalf("without audit_log: Installed = %v, %v", ok, err)
	}
	if _, err := console.ListAudit(context.Background(), d, console.AuditFilter{}); !errors.Is(err, console.ErrNoAuditTable) {
		t.Fatalf("ListAudit without the table: %v, want ErrNoAuditTable", err)
	}
}

// TestReviseRefusedUnlessForced: the second letter of a message id whose
// first letter was revised cannot be revised too (a second revision would
// be applied beside the first) unless forced, and forcing needs a reason.
func TestReviseRefusedUnlessForced(t *testing.T) {
	eachDB(t, console.Config{}, func(t *testing.T, h *harness) {
		first := h.park(letter("billing", "orders", "m-r", `{"n":1}`))
		second := h.park(letter("billing", "orders", "m-r", `{"n":2}`))
		if first == second {
			t.Fatal("two payloads of one id share a letter")
		}
		path := func(id int64) string { return fmt.Sprintf("/console/dlq/%d/revise", id) }
		if r := h.post(path(first), url.Values{"payload": {`{"n":3}`}}); r.status != http.StatusSeeOther {
			t.Fatalf("first revise: %d %s", r.status, r.body)
		}
		if r := h.post(path(second), url.Values{"payload": {`{"n":3}`}}); r.status != http.StatusConflict || !strings.Contains(r.body, "revise with force") {
			t.Fatalf("second revise: %d %s, want 409 naming force", r.status, r.body)
		}
		if r := h.post(path(second), url.Values{"payload": {`{"n":3}`}, "force": {"1"}}); r.status != http.StatusBadRequest {
			t.Fatalf("forced without a reason: %d, want 400", r.status)
		}
		if n := len(h.pub.published()); n != 1 {
			t.Fatalf("%d published after the refusals, want 1", n)
		}
		if r := h.post(path(second), url.Values{"payload": {`{"n":3}`}, "force": {"1"}, "reason": {"both payloads are meant"}}); r.status != http.StatusSeeOther {
			t.Fatalf("forced revise: %d %s", r.status, r.body)
		}
		if l := h.letter(second); l.State != dlq.Discarded || len(h.pub.published()) != 2 {
			t.Fatalf("second letter %s, %d published", l.State, len(h.pub.published()))
		}
	})
}
