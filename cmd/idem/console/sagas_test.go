package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/console"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/saga"
	"github.com/idemkit/idem/store"
)

// sagaHelpers makes held sagas on d: a saga "order" whose first step
// (charge) applies, whose second (confirm) fails permanently, and whose
// charge compensation (refund) fails permanently while refundFails is set,
// which holds the saga on saga/<id>/charge/undo. The worker starts with the
// first hold and stops at the end of the test.
type sagaHelpers struct {
	hold        func(id string) saga.Saga
	get         func(id string) saga.Saga
	wait        func(id string, want saga.State) saga.Saga
	refundFails atomic.Bool
}

func newSagaHelpers[TTx any](t *testing.T, d store.Driver[TTx]) *sagaHelpers {
	ctx := context.Background()
	sh := &sagaHelpers{}
	sh.refundFails.Store(true)
	ledger, err := effect.New(d, effect.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, saga.Call) ([]byte, error) { return []byte(`{"ok":true}`), nil }
	s, err := saga.New(d, ledger, saga.Config{}, saga.Definition[TTx]{Name: "order", Steps: []saga.Step[TTx]{
		{Name: "charge", Do: ok, Undo: func(ctx context.Context, c saga.Call) ([]byte, error) {
			if sh.refundFails.Load() {
				return nil, idem.Permanent(errors.New(`refund refused: <script>alert("x")</script>`))
			}
			return []byte(`{"refunded":true}`), nil
		}},
		{Name: "confirm", Do: func(context.Context, saga.Call) ([]byte, error) {
			return nil, idem.Permanent(errors.New("event cancelled"))
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	startWorker := func() {
		w, err := saga.NewWorker(s, saga.WorkerConfig[TTx]{Effect: effect.WorkerConfig[TTx]{PollInterval: 10 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(wctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	sh.get = func(id string) saga.Saga {
		sg, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return sg
	}
	sh.wait = func(id string, want saga.State) saga.Saga {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			sg := sh.get(id)
			if sg.State == want {
				return sg
			}
			if time.Now().After(deadline) {
				t.Fatalf("saga %s is %s (%s), want %s", id, sg.State, sg.LastError, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	sh.hold = func(id string) saga.Saga {
		t.Helper()
		once.Do(startWorker)
		if _, _, err := s.Start(ctx, "order", id, []byte(`{"amount":650}`)); err != nil {
			t.Fatal(err)
		}
		sg := sh.wait(id, saga.Held)
		if sg.CurrentKey != saga.Key(id, "charge", saga.Undo) {
			t.Fatalf("held saga waits for %q", sg.CurrentKey)
		}
		return sg
	}
	return sh
}

// sagaDB runs fn on each database with the saga helpers.
func sagaDB(t *testing.T, fn func(t *testing.T, h *harness, sh *sagaHelpers)) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		fn(t, newHarness(t, e.D, console.Config{}), newSagaHelpers(t, e.D))
	})
}

func TestHeldSagas(t *testing.T) {
	sagaDB(t, func(t *testing.T, h *harness, sh *sagaHelpers) {
		sg := sh.hold("o-held")
		sh.hold("o-held-2")
		page := h.get("/console/held")
		if n := strings.Count(page, `data-testid="held-saga-row"`); n != 2 {
			t.Fatalf("held page shows %d saga rows, want 2\n%s", n, page)
		}
		for _, want := range []string{"Held sagas", `data-key="o-held"`, ">order<", "saga/o-held/charge/undo", "charge <small>(0 of 2)",
			`action="/console/held/saga/release"`, `action="/console/held/saga/resolve"`, "refund refused: &lt;script&gt;"} {
			if !strings.Contains(page, want) {
				t.Errorf("held page lacks %q", want)
			}
		}
		if strings.Contains(page, "<script>alert") {
			t.Fatal("the compensation's error is not escaped")
		}
		if !strings.Contains(h.get("/console/"), `data-testid="held-sagas">2<`) {
			t.Error("overview does not count 2 held sagas")
		}

		// A reason is required; without one nothing changes.
		form := url.Values{"id": {"o-held"}, "key": {sg.CurrentKey}}
		if r := h.post("/console/held/saga/release", form); r.status != http.StatusBadRequest {
			t.Fatalf("release without a reason: %d, want 400", r.status)
		}
		// A form that shows another compensation than the saga waits for.
		if r := h.post("/console/held/saga/release", url.Values{"id": {"o-held"}, "key": {"saga/o-held/confirm/undo"},
			"reason": {"x"}}); r.status != http.StatusConflict {
			t.Fatalf("release of a stale form: %d, want 409", r.status)
		}
		if r := h.post("/console/held/saga/release", url.Values{"id": {"nope"}, "reason": {"x"}}); r.status != http.StatusNotFound {
			t.Fatalf("release of an unknown saga: %d, want 404", r.status)
		}
		time.Sleep(100 * time.Millisecond) // the worker would have moved it by now
		if got := sh.get("o-held"); got.State != saga.Held {
			t.Fatalf("saga after refused releases: %s", got.State)
		}

		// Release: the compensation is retried and the saga resumes.
		sh.refundFails.Store(false)
		form.Set("reason", "refund API fixed")
		if r := h.post("/console/held/saga/release", form); r.status != http.StatusSeeOther {
			t.Fatalf("release: %d %s", r.status, r.body)
		}
		sh.wait("o-held", saga.Compensated)
		// A second submit of the same form is refused.
		if r := h.post("/console/held/saga/release", form); r.status != http.StatusConflict {
			t.Fatalf("second release: %d, want 409", r.status)
		}

		// Resolve as completed: the refund was done by hand.
		sh.refundFails.Store(true)
		if r := h.post("/console/held/saga/resolve", url.Values{"id": {"o-held-2"}, "key": {"saga/o-held-2/charge/undo"},
			"result": {`{"refund":"manual"}`}, "reason": {"refunded in the provider's dashboard"}}); r.status != http.StatusSeeOther {
			t.Fatalf("resolve: %d %s", r.status, r.body)
		}
		sh.wait("o-held-2", saga.Compensated)
		if e := h.effects("saga/o-held-2/charge/undo"); e.State != effect.Completed || string(e.Result) != `{"refund":"manual"}` {
			t.Fatalf("resolved compensation: %s %q", e.State, e.Result)
		}

		if got := h.get("/console/held"); strings.Count(got, `data-testid="held-saga-row"`) != 0 || !strings.Contains(got, "No sagas held.") {
			t.Fatal("held page still shows sagas after both were handled")
		}
		es := h.audit(console.AuditFilter{Action: "held.saga."})
		// stale form, unknown saga, release, second release, resolve (the
		// refusals after the reason check are recorded as failed)
		if len(es) != 5 {
			t.Fatalf("audit = %+v, want 5 entries", es)
		}
		last := es[0]
		if last.Action != "held.saga.resolve" || last.Target != "saga o-held-2" || last.Reason != "refunded in the provider's dashboard" ||
			last.Outcome != "ok" || !strings.Contains(last.Details, "effect saga/o-held-2/charge/undo") {
			t.Fatalf("resolve audit entry: %+v", last)
		}
		var okRelease int
		for _, e := range es {
			if e.Action == "held.saga.release" && e.Outcome == "ok" {
				okRelease++
				if e.Reason != "refund API fixed" || e.Target != "saga o-held" {
					t.Errorf("release audit entry: %+v", e)
				}
			}
		}
		if okRelease != 1 {
			t.Fatalf("%d successful release entries, want 1: %+v", okRelease, es)
		}
	})
}

func TestHeldSagaNoTokenChangesNothing(t *testing.T) {
	sagaDB(t, func(t *testing.T, h *harness, sh *sagaHelpers) {
		sg := sh.hold("o-held")
		sh.refundFails.Store(false) // a release would now resume it
		form := url.Values{"id": {"o-held"}, "key": {sg.CurrentKey}, "reason": {"r"}}
		for name, r := range map[string]req{
			"release no token":     {method: "POST", path: "/console/held/saga/release", form: form},
			"resolve no token":     {method: "POST", path: "/console/held/saga/resolve", form: form},
			"release wrong bearer": {method: "POST", path: "/console/held/saga/release", form: form, bearer: "nope"},
		} {
			if got := h.do(r); got.status != http.StatusUnauthorized {
				t.Errorf("%s: status %d, want 401", name, got.status)
			}
		}
		if r := h.do(req{method: "GET", path: "/console/held"}); r.status != http.StatusSeeOther || strings.Contains(r.body, "o-held") {
			t.Fatalf("GET /console/held without token: %d, shows the saga: %v", r.status, strings.Contains(r.body, "o-held"))
		}
		time.Sleep(100 * time.Millisecond)
		if got := sh.get("o-held"); got.State != saga.Held {
			t.Fatalf("saga is %s after unauthenticated requests, want held", got.State)
		}
		if e := h.effects(sg.CurrentKey); e.State != effect.Failed {
			t.Fatalf("compensation is %s after unauthenticated requests, want failed", e.State)
		}
		if n := h.count(`SELECT count(*) FROM ` + h.table("audit_log")); n != 0 {
			t.Fatalf("%d audit rows after refused requests", n)
		}
	})
}

// Without the saga tables (0008_sagas not applied) the held page and the
// overview omit sagas instead of failing.
func TestHeldPageWithoutSagaTables(t *testing.T) {
	eachDB(t, console.Config{}, func(t *testing.T, h *harness) {
		h.exec(`DROP TABLE ` + h.table("saga_steps"))
		h.exec(`DROP TABLE ` + h.table("sagas"))
		page := h.get("/console/held")
		if strings.Contains(page, "Held sagas") || strings.Contains(page, "held-saga-row") {
			t.Fatal("held page shows a saga section without the sagas table")
		}
		if !strings.Contains(page, "No effects held.") {
			t.Fatal("held page lacks the effects section")
		}
		if strings.Contains(h.get("/console/"), `data-testid="held-sagas"`) {
			t.Fatal("overview shows held sagas without the sagas table")
		}
		if r := h.post("/console/held/saga/release", url.Values{"id": {"o-1"}, "reason": {"x"}}); r.status != http.StatusNotFound {
			t.Fatalf("saga release without the sagas table: %d, want 404", r.status)
		}
	})
}
