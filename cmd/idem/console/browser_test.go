package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/cmd/idem/console"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/store"
)

// EnvChromium names the Chromium binary the browser test drives
// (/usr/bin/chromium from Debian's chromium package; .ci/chromium.sh
// installs it). Unset, the test is skipped.
const EnvChromium = "IDEM_TEST_CHROMIUM"

// EnvScreenshots, if set, is the directory the browser test writes its
// screenshots to (docs/console in the repository); otherwise a temporary one.
const EnvScreenshots = "IDEM_CONSOLE_SCREENSHOTS"

// css is a CSS selector.
type css = chromedp.CSS

// TestBrowser drives the console in headless Chromium against the
// reference system (SQLite, embedded JetStream, all consumers running):
// log in, watch a poison message land in the dead letters, redrive it,
// bulk-discard ten letters matching a filter, edit and redrive one as a
// new revision (only the revision is processed), release a held effect,
// look up a key, and find every action in the audit list.
func TestBrowser(t *testing.T) {
	exe := os.Getenv(EnvChromium)
	if exe == "" {
		t.Skipf("%s is not set: skipping the browser test (run .ci/chromium.sh and set %s=/usr/bin/chromium)", EnvChromium, EnvChromium)
	}
	shots := os.Getenv(EnvScreenshots)
	if shots == "" {
		shots = t.TempDir()
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	sys, err := boxoffice.Open(ctx, boxoffice.Options{DataDir: t.TempDir(),
		Config: boxoffice.Config{WebhookSecrets: []string{"whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ="}, RetryBase: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	if err := sys.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pub, err := sys.Config().Broker.Publisher()
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	c, err := console.New(sys.DB(), console.Config{Token: token, Publisher: pub, Gatherer: sys.Registry(),
		SampleInterval: time.Second, Describe: "boxoffice under test"})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Run(ctx) }()
	mux := http.NewServeMux()
	mux.Handle("/", sys.Handler())
	mux.Handle("/console/", c.Handler())
	mux.Handle("POST /demo/poison", sys.PoisonHandler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	base := srv.URL + "/console"

	db := sys.DB()
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int64
		if err := db.Pool().QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return int(n)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1360, 900))
	defer cancelAlloc()
	b, cancelB := chromedp.NewContext(alloc)
	defer cancelB()
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(b, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(b, chromedp.Text(css(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	countSel := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(b, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
		if err != nil {
			t.Fatalf("count %s: %v", sel, err)
		}
		return n
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(b, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// submit clicks a button that posts a form and waits for the flash of
	// the page it redirects to.
	submit := func(what, button string) {
		t.Helper()
		do(what, chromedp.Click(css(button)), chromedp.WaitVisible(css(`[data-testid="flash"]`)))
	}

	// Log in.
	do("open", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(`[data-testid="login-form"]`)))
	do("fill login", chromedp.SendKeys(css(`input[name="name"]`), "ana"), chromedp.SendKeys(css(`input[name="token"]`), "wrong"))
	do("bad login", chromedp.Click(css(`[data-testid="login-submit"]`)), chromedp.WaitVisible(css(`p.error`)))
	if n := countSel(`[data-testid="dlq-count"]`); n != 0 {
		t.Fatal("a wrong token reached the overview")
	}
	do("fill login", chromedp.SetValue(css(`input[name="name"]`), "ana"), chromedp.SetValue(css(`input[name="token"]`), token))
	shot("login")
	do("log in", chromedp.Click(css(`[data-testid="login-submit"]`)), chromedp.WaitVisible(css(`[data-testid="dlq-count"]`)))
	if got := text(`[data-testid="dlq-count"]`); got != "0" {
		t.Fatalf("dlq-count %q before any poison, want 0", got)
	}

	// A poison message lands in the dead letters (one letter per consumer).
	resp, err := http.Post(srv.URL+"/demo/poison", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var poison struct {
		MessageID string `json:"message_id"`
		OrderID   string `json:"order_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&poison); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /demo/poison: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	waitFor("the poison's dead letters", func() bool {
		do("reload overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(`[data-testid="dlq-count"]`)))
		return text(`[data-testid="dlq-count"]`) == "3"
	})
	shot("overview")
	do("dead letters", chromedp.Navigate(base+"/dlq"), chromedp.WaitVisible(css(`[data-testid="dlq-filter"]`)))
	if n := countSel(`[data-testid="dlq-row"]`); n != 3 {
		t.Fatalf("%d dlq rows, want 3", n)
	}
	shot("dlq")
	letterOf := func(consumer string) dlq.Letter {
		t.Helper()
		ls, err := sys.DeadLetters().List(ctx, dlq.Filter{Consumer: consumer, State: dlq.Parked})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.MessageID == poison.MessageID {
				return l
			}
		}
		t.Fatalf("no parked letter of %s for %s", consumer, poison.MessageID)
		return dlq.Letter{}
	}

	// Redrive the search consumer's letter.
	search := letterOf(boxoffice.ConsumerSearch)
	do("open letter", chromedp.Navigate(fmt.Sprintf("%s/dlq/%d", base, search.ID)), chromedp.WaitVisible(css(`[data-testid="dlq-redrive"]`)))
	shot("letter")
	do("redrive reason", chromedp.SendKeys(css(`[data-testid="redrive-reason"]`), "search index fixed"))
	submit("redrive", `[data-testid="dlq-redrive"]`)
	if got := text(`[data-testid="letter-state"]`); !strings.HasPrefix(got, "redriven by ana") {
		t.Fatalf("letter state after redrive: %q", got)
	}
	if es, err := console.ListAudit(ctx, sys.DB(), console.AuditFilter{Action: "dlq.redrive"}); err != nil || len(es) != 1 || es[0].Reason != "search index fixed" {
		t.Fatalf("audit of the redrive: %+v %v, want one entry with the reason typed", es, err)
	}

	// Bulk-discard ten letters matching a filter (and only those).
	for i := range 10 {
		if _, err := sys.DeadLetters().Park(ctx, dlq.Letter{Consumer: "legacy-import", Source: "imports", MessageID: fmt.Sprintf("imp-%d", i),
			Payload: []byte(fmt.Sprintf(`{"row":%d}`, i)), Error: "invalid input: no such customer", ErrorClass: "invalid_input"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sys.DeadLetters().Park(ctx, dlq.Letter{Consumer: "legacy-import", Source: "exports", MessageID: "exp-1",
		Payload: []byte(`{}`), Error: "invalid input", ErrorClass: "invalid_input"}); err != nil {
		t.Fatal(err)
	}
	do("filter", chromedp.Navigate(base+"/dlq"), chromedp.WaitVisible(css(`[data-testid="dlq-filter"]`)),
		chromedp.SendKeys(css(`[data-testid="dlq-filter"] input[name="consumer"]`), "legacy-import"),
		chromedp.SendKeys(css(`[data-testid="dlq-filter"] input[name="subject"]`), "imports"),
		chromedp.Click(css(`[data-testid="dlq-filter-apply"]`)),
		// The unfiltered page has a bulk button too: wait for the page the
		// server rendered for this filter (typing sets only the property,
		// the server sets the value attribute).
		chromedp.WaitVisible(css(`[data-testid="dlq-filter"] input[name="subject"][value="imports"]`)),
		chromedp.WaitVisible(css(`[data-testid="dlq-bulk-discard"]`)))
	if n := countSel(`[data-testid="dlq-row"]`); n != 10 {
		t.Fatalf("%d rows match the filter, want 10", n)
	}
	do("bulk discard", chromedp.Click(css(`[data-testid="dlq-bulk-discard"]`)), chromedp.WaitVisible(css(`[data-testid="dlq-bulk-count"]`)))
	if got := text(`[data-testid="dlq-bulk-count"]`); got != "10" {
		t.Fatalf("confirmation count %q, want 10", got)
	}
	do("reason", chromedp.SendKeys(css(`input[name="reason"]`), "import rerun from source"))
	shot("dlq-bulk")
	submit("confirm bulk", `[data-testid="dlq-bulk-confirm"]`)
	if got := text(`[data-testid="flash"]`); !strings.Contains(got, "10 letter(s)") {
		t.Fatalf("flash after bulk: %q", got)
	}
	if n := count(`SELECT count(*) FROM ` + db.Table("dead_letters") + ` WHERE consumer = 'legacy-import' AND state = 'discarded'`); n != 10 {
		t.Fatalf("%d letters discarded, want 10", n)
	}
	if n := count(`SELECT count(*) FROM ` + db.Table("dead_letters") + ` WHERE message_id = 'exp-1' AND state = 'parked'`); n != 1 {
		t.Fatal("the letter outside the filter was touched")
	}

	// Edit and redrive the notification letter: seats 0 → 2.
	note := letterOf(boxoffice.ConsumerNotification)
	do("open letter", chromedp.Navigate(fmt.Sprintf("%s/dlq/%d", base, note.ID)), chromedp.WaitVisible(css(`[data-testid="dlq-revise-payload"]`)))
	payload, err := chromedp.Run(b, chromedp.Value(css(`[data-testid="dlq-revise-payload"]`)))
	if err != nil || !strings.Contains(payload, `"seats": 0`) {
		t.Fatalf("edit field %q %v", payload, err)
	}
	do("edit", chromedp.SetValue(css(`[data-testid="dlq-revise-payload"]`), strings.Replace(payload, `"seats": 0`, `"seats": 2`, 1)),
		chromedp.SendKeys(css(`[data-testid="dlq-revise-form"] input[name="reason"]`), "seats were lost upstream"))
	submit("revise", `[data-testid="dlq-revise"]`)
	loc, err := chromedp.Run(b, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(loc)
	revID := u.Query().Get("revision")
	if revID == "" || revID == poison.MessageID {
		t.Fatalf("revision id %q", revID)
	}
	inbox := db.Table("inbox")
	waitFor("the revision to be processed", func() bool {
		return count(`SELECT count(*) FROM `+inbox+` WHERE consumer = $1 AND message_id = $2 AND state = 'completed'`,
			boxoffice.ConsumerNotification, revID) == 1
	})
	// The revision recorded the original as consumed by notification (so a
	// re-send of it is a duplicate there), and was for notification only:
	// the other consumers, holding their own letters, did not process it.
	if n := count(`SELECT count(*) FROM `+inbox+` WHERE consumer = $1 AND message_id = $2 AND state = 'completed'`,
		boxoffice.ConsumerNotification, poison.MessageID); n != 1 {
		t.Fatalf("notification's inbox holds the original %d times, want once (recorded by the revision)", n)
	}
	if n := count(`SELECT count(*) FROM `+inbox+` WHERE consumer <> $1 AND message_id = $2`,
		boxoffice.ConsumerNotification, revID); n != 0 {
		t.Fatalf("%d other consumers processed notification's revision", n)
	}
	if l, _ := sys.DeadLetters().Get(ctx, note.ID); l.State != dlq.Discarded {
		t.Fatalf("original letter is %s, want discarded", l.State)
	}
	e, err := sys.Ledger().Get(ctx, boxoffice.ConfirmationEmailKey(poison.OrderID))
	if err != nil {
		t.Fatalf("the revision's e-mail was not scheduled: %v", err)
	}
	_ = e

	// Release a held effect (an inline call whose caller died: in progress,
	// lease run out, kind '' so no worker claims it).
	now := store.Micros(time.Now())
	if _, err := db.Pool().Exec(ctx, `INSERT INTO `+db.Table("effects")+` (effect_key, kind, payload, fingerprint, state, attempts,
 token, lease_until, next_attempt_at, last_error, created_at, updated_at) VALUES ('charge:ord-held-1', '', $1, $2, 'in_progress', 1, 1,
 $3, $3, 'caller died mid-call', $3, $3)`, []byte(`{"amount":4500}`), []byte("inline"), now-60_000_000); err != nil {
		t.Fatal(err)
	}
	do("held", chromedp.Navigate(base+"/held"), chromedp.WaitVisible(css(`tr[data-key="charge:ord-held-1"]`)))
	shot("held")
	row := `tr[data-key="charge:ord-held-1"] `
	do("reason", chromedp.SendKeys(css(row+`form[action$="/held/effect/release"] input[name="reason"]`), "provider has no such charge"))
	submit("release", row+`[data-testid="held-release"]`)
	if e, err := sys.Ledger().Get(ctx, "charge:ord-held-1"); err != nil || e.State != effect.Pending {
		t.Fatalf("released effect: %s %v, want pending", e.State, err)
	}

	// Look up a key stored by the order API.
	req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(
		`{"event_id":"concert-1","customer_email":"ana@example.com","seats":2,"total_cents":9000,"currency":"EUR"}`))
	req.Header.Set("Idempotency-Key", "order-browser-1")
	req.Header.Set("X-Tenant-ID", "acme")
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /orders: %v %v", resp, err)
	}
	resp.Body.Close()
	do("keys", chromedp.Navigate(base+"/keys"), chromedp.WaitVisible(css(`[data-testid="key-lookup"]`)),
		chromedp.SendKeys(css(`[data-testid="key-lookup"] input[name="tenant"]`), "acme"),
		chromedp.SendKeys(css(`[data-testid="key-lookup"] input[name="operation"]`), "POST /orders"),
		chromedp.SendKeys(css(`[data-testid="key-lookup"] input[name="key"]`), "order-browser-1"),
		chromedp.Click(css(`[data-testid="key-lookup-submit"]`)), chromedp.WaitVisible(css(`[data-testid="key-result"]`)))
	if got := text(`[data-testid="key-status"]`); got != "201" {
		t.Fatalf("stored status %q, want 201", got)
	}
	if got := text(`[data-testid="key-body"]`); !strings.Contains(got, `"order_id"`) {
		t.Fatalf("stored body %q", got)
	}
	shot("keys")

	// The outbox page, with a parked event holding two back.
	// A parked event is stored failed (migration 0010).
	for i, st := range []string{"failed", "pending", "pending"} {
		if _, err := db.Pool().Exec(ctx, `INSERT INTO `+db.Table("outbox")+` (source, event_id, type, subject, time, ordering_key, payload,
 state, attempts, last_error, created_at) VALUES ('screenshot', $1, 'OrderShipped', 'shipments', $2, 'ord-blocked', $3, $4, $5, $6, $2)`,
			fmt.Sprintf("ship-%d", i), now, []byte(fmt.Sprintf(`{"n":%d}`, i)), st, map[bool]int{true: 5}[st == "failed"],
			map[bool]string{true: "nats: no responders available for request"}[st == "failed"]); err != nil {
			t.Fatal(err)
		}
	}
	do("outbox", chromedp.Navigate(base+"/outbox"), chromedp.WaitVisible(css(`[data-testid="outbox-row"]`)))
	shot("outbox")

	// Every action is in the audit list: the bulk discard as one entry
	// and each letter it discarded as its own (the dlq store's entry).
	do("audit", chromedp.Navigate(base+"/audit"), chromedp.WaitVisible(css(`[data-testid="audit-row"]`)))
	for a, want := range map[string]int{"dlq.redrive": 1, "dlq.bulk-discard": 1, "dlq.discard": 10, "dlq.revise": 1, "held.effect.release": 1} {
		if n := countSel(fmt.Sprintf(`[data-testid="audit-row"][data-action=%q]`, a)); n != want {
			t.Errorf("audit list shows %d %s rows, want %d", n, a, want)
		}
	}
	if n := countSel(`[data-testid="audit-row"]`); n != 14 {
		t.Errorf("audit list shows %d rows, want 14", n)
	}
	shot("audit")
	do("overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(`[data-testid="dlq-count"]`)))
	shot("overview-after")
}
