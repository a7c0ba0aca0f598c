package idemtest

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
)

// Concurrency is how many requests with one key the concurrent scenario
// sends at once.
const Concurrency = 8

// Service is the user's HTTP code under test.
type Service struct {
	// Backend is the database (default: a fresh SQLite file).
	Backend Backend
	// Config configures the idemhttp middleware; Mode must be
	// Transactional (the default): the handler's writes are expected on
	// the request transaction, idemhttp.SQLTx.
	Config idemhttp.Config
	// Setup creates the user's own tables; it runs once, after idem's
	// migrations. Optional.
	Setup func(ctx context.Context, db DB) error
	// Handler builds the user's handler as in production, mounting the
	// routes under test behind env.Idempotent (the idemhttp middleware
	// on idemtest's store).
	Handler func(env Env) http.Handler
	// Invariant checks the database after every step, e.g. "one payment
	// row per key" or "as many e-mails queued as payments"; an error is
	// reported with the step that broke it. Required.
	Invariant func(ctx context.Context, db DB) error
}

// Env is what Service.Handler wires the user's handler with.
type Env struct {
	// DB is the database; the handler's writes belong on the request
	// transaction (idemhttp.SQLTx), not on DB.
	DB DB
	// Idempotent is the idemhttp middleware on DB (the shape of
	// Middleware.Handler), through which idemtest injects its faults.
	Idempotent func(http.Handler) http.Handler
	// Store is idem's store on DB, with idemtest's faults, for the
	// user's own idem components (an outbox.Writer, an effect.Ledger…)
	// that the handler writes through on its transaction.
	Store store.Driver[*sql.Tx]
}

// Case is one request of the user's API.
type Case struct {
	// Name names the case in failures; defaults to "METHOD Path".
	Name string
	// Method defaults to POST.
	Method string
	// Path is the request target, e.g. "/payments".
	Path string
	// Body is the request body.
	Body string
	// Header is sent with the request (besides Idempotency-Key). A
	// Content-Type is added when missing: application/json for a JSON
	// body, text/plain otherwise.
	Header http.Header
	// Status is the expected status of the first execution; 0 accepts any
	// 2xx. It must be a status idemhttp stores (Config.StoreStatus), or
	// no retry could replay it.
	Status int
}

func (c Case) name() string {
	if c.Name != "" {
		return c.Name
	}
	return c.method() + " " + c.Path
}

func (c Case) method() string {
	if c.Method == "" {
		return http.MethodPost
	}
	return c.Method
}

func (c Case) statusOK(status int) bool {
	if c.Status != 0 {
		return status == c.Status
	}
	return status >= 200 && status < 300
}

func (c Case) wantStatus() string {
	if c.Status != 0 {
		return fmt.Sprint(c.Status)
	}
	return "2xx"
}

// HTTP proves that the user's handler, behind idemhttp in transactional
// mode, is effectively-once. For each case, on a fresh key each time, it
// sends: the request and the same key again (expects a replay: same status
// and body, Idempotent-Replayed: true); Concurrency racing requests with one
// key (exactly one execution; the others replay or get 409); a request
// whose answer is lost on its way back (the connection closes as the
// server writes it, so the client never reads it), then its retry (a
// replay of that answer, status and body byte for byte); a request failed
// at each step of the middleware's transaction (BEGIN, a crash after the
// handler, the record, COMMIT), then its retry (a fresh execution); the
// same key with another body (422); a client that hangs up as the handler
// returns, then retries (a replay or a fresh execution, whichever the race
// left). The invariant runs after each step, and the handler's executions
// behind env.Idempotent are counted per request key: a replay, a 422 and a
// failed BEGIN must not run it, a fresh execution runs it once. A failure
// tells the step, the attempt, the answers, what the invariant saw and
// what to change.
func HTTP(t testing.TB, svc Service, cases ...Case) {
	t.Helper()
	if svc.Handler == nil || svc.Invariant == nil {
		t.Fatalf("idemtest.HTTP: Service.Handler and Service.Invariant are required")
		return
	}
	if svc.Config.Mode != idemhttp.Transactional {
		t.Fatalf("idemtest.HTTP: Service.Config.Mode is %v; idemtest checks transactional mode, where the handler's writes commit with the record", svc.Config.Mode)
		return
	}
	if len(cases) == 0 {
		t.Fatalf("idemtest.HTTP: no cases")
		return
	}
	h, err := newHarness(t, svc)
	if err != nil {
		t.Fatalf("idemtest.HTTP: %v", err)
		return
	}
	for i, c := range cases {
		h.run(i, c)
	}
}

// harness is one HTTP run: the store, the fault injector and the user's
// handler on them.
type harness struct {
	t   testing.TB
	svc Service
	db  DB
	in  *injector
	top http.Handler
	seq int // scenarios run, for fresh keys

	mu   sync.Mutex
	runs map[string]int // executions of the handler per request key (see observe)
}

func newHarness(t testing.TB, svc Service) (*harness, error) {
	d, err := svc.Backend.open(t)
	if err != nil {
		return nil, fmt.Errorf("open the store: %w", err)
	}
	ctx := context.Background()
	db := DB{DB: d.DB(), Dialect: d.Dialect()}
	if svc.Setup != nil {
		if err := svc.Setup(ctx, db); err != nil {
			return nil, fmt.Errorf("Setup: %w", err)
		}
	}
	h := &harness{t: t, svc: svc, db: db, in: &injector{}, runs: map[string]int{}}
	cfg := svc.Config
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler) // injected faults are expected
	}
	fd := newFaultDriver(d, h.in)
	mw, err := idemhttp.New(fd, cfg)
	if err != nil {
		return nil, fmt.Errorf("idemhttp.New: %w", err)
	}
	h.top = svc.Handler(Env{DB: db, Store: fd, Idempotent: func(next http.Handler) http.Handler {
		return mw.Handler(h.observe(next))
	}})
	if h.top == nil {
		return nil, fmt.Errorf("Service.Handler returned nil")
	}
	return h, nil
}

// observe counts the handler's executions per key and crashes after the
// handler when faultAfterHandler is armed. The key is the one idemtest sent
// the request with (carried in its context), so that code in front of
// env.Idempotent that runs the request again under another key is counted
// against the request that caused it; idemhttp's key is the fallback.
func (h *harness) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := r.Context().Value(requestKey{}).(string)
		if !ok {
			key = idemhttp.Key(r.Context())
		}
		h.mu.Lock()
		h.runs[key]++
		h.mu.Unlock()
		next.ServeHTTP(w, r)
		if h.in.take(faultAfterHandler) {
			panic(crash{})
		}
		if giveUp, ok := r.Context().Value(giveUpKey{}).(context.CancelFunc); ok {
			giveUp()
		}
	})
}

func (h *harness) executions(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[key]
}

// requestKey carries, in a request's context, the Idempotency-Key idemtest
// sent it with.
type requestKey struct{}

// answer is one response as the server wrote it.
type answer struct {
	status   int
	body     string
	replayed bool
	crashed  bool // the process crashed: no answer
	lost     bool // the client never read the answer
}

func (a answer) String() string {
	switch {
	case a.crashed:
		return "no answer (process crashed)"
	case a.lost && a.status == 0:
		return "no answer read (client gave up)"
	case a.lost:
		return "answer written but never read by the client: " + answer{status: a.status, body: a.body, replayed: a.replayed}.String()
	}
	s := fmt.Sprint(a.status)
	if a.replayed {
		s += " replayed"
	}
	if b := strings.TrimSpace(a.body); b != "" {
		if len(b) > 200 {
			b = b[:200] + "…"
		}
		s += " " + b
	}
	return s
}

// send sends c with key (and body instead of c.Body when body is not nil).
func (h *harness) send(ctx context.Context, c Case, key string, body *string) answer {
	w := httptest.NewRecorder()
	if h.serve(w, h.request(ctx, c, key, body)) {
		return answer{crashed: true}
	}
	return answer{status: w.Code, body: w.Body.String(), replayed: w.Header().Get(idemhttp.HeaderReplayed) == "true"}
}

// sendLost sends c with key on a connection that closes as the server
// answers: the answer goes nowhere and the client never reads it. It
// returns the answer the server wrote, marked lost.
func (h *harness) sendLost(c Case, key string) answer {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &lostWriter{header: http.Header{}, closed: cancel}
	if h.serve(w, h.request(ctx, c, key, nil)) {
		return answer{crashed: true}
	}
	return answer{status: w.status(), body: w.body.String(), replayed: w.sent.Get(idemhttp.HeaderReplayed) == "true", lost: true}
}

// lostWriter is the server's end of a connection that the client closed
// before reading its answer: what the server writes is kept, to compare
// the retry with, but reaches no one, and the request's context ends
// (closed) as the server starts to answer, as when net/http sees the
// connection gone. Writes succeed, as writes into a socket buffer do.
type lostWriter struct {
	header http.Header
	sent   http.Header // header as of WriteHeader
	code   int
	body   bytes.Buffer
	closed context.CancelFunc
}

// Header implements http.ResponseWriter.
func (w *lostWriter) Header() http.Header { return w.header }

// WriteHeader implements http.ResponseWriter; 1xx answers are dropped.
func (w *lostWriter) WriteHeader(code int) {
	if w.code != 0 || code < 200 {
		return
	}
	w.code, w.sent = code, w.header.Clone()
	w.closed()
}

// Write implements http.ResponseWriter.
func (w *lostWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.body.Write(p)
}

// Flush implements http.Flusher: nothing reaches the client anyway.
func (w *lostWriter) Flush() {}

// status is the status the server answered: 200 when it wrote nothing.
func (w *lostWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// serve runs r through the user's handler into w and reports whether the
// process crashed (faultAfterHandler).
func (h *harness) serve(w http.ResponseWriter, r *http.Request) (crashed bool) {
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(crash); !ok {
				panic(p)
			}
			crashed = true
		}
	}()
	h.top.ServeHTTP(w, r)
	return false
}

// request builds c's request with key (and body instead of c.Body when
// body is not nil).
func (h *harness) request(ctx context.Context, c Case, key string, body *string) *http.Request {
	b := c.Body
	if body != nil {
		b = *body
	}
	r := httptest.NewRequestWithContext(context.WithValue(ctx, requestKey{}, key), c.method(), c.Path, strings.NewReader(b))
	for k, vs := range c.Header {
		r.Header[k] = append([]string(nil), vs...)
	}
	if r.Header.Get("Content-Type") == "" && b != "" {
		if json.Valid([]byte(b)) {
			r.Header.Set("Content-Type", "application/json")
		} else {
			r.Header.Set("Content-Type", "text/plain")
		}
	}
	r.Header.Set(idemhttp.HeaderKey, key)
	return r
}

// httpStory is the story of one case's scenario on one key.
type httpStory struct {
	story
	h   *harness
	c   Case
	key string
}

func (h *harness) story(i int, c Case, scenario string) *httpStory {
	h.seq++
	key := fmt.Sprintf("idemtest-%d-%d-%d", i, h.seq, time.Now().UnixNano())
	s := &httpStory{h: h, c: c, key: key}
	s.story = story{
		t:     h.t,
		title: fmt.Sprintf("case %q, scenario %q (key %s)", c.name(), scenario, key),
		ran:   func() string { return fmt.Sprintf("the handler ran %d time(s) for this key", h.executions(key)) },
		check: func(ctx context.Context) error { return h.svc.Invariant(ctx, h.db) },
	}
	return s
}

// Hints: what a violation at each point means and what to change.
const (
	hintOutside = "the handler has an effect that is not a write on the request transaction (idemhttp.SQLTx): " +
		"a write on another connection (env.DB) or a pool, an e-mail, an in-memory counter or a call to another service. " +
		"It survived an attempt that was rolled back (and a retry does it again). Write it on the request transaction " +
		"(an outbox row for a message or an e-mail), or call the other service with idemhttp.Key(ctx) as its idempotency key " +
		"through the effect ledger"
	hintBeforeClaim = "something ran although the key was not claimed: code placed in front of env.Idempotent " +
		"(a middleware or the route's own code before it) has an effect on every request, replays included. " +
		"Move that effect into the handler behind env.Idempotent, on the request transaction (idemhttp.SQLTx)"
	hintFirst = "the first execution already breaks the invariant: check the invariant itself, and that the handler " +
		"writes its rows on the request transaction (idemhttp.SQLTx)"
	hintStatus = "the handler must answer the case's expected status on a fresh key. On SQLite a write on another " +
		"connection than the request transaction waits for that transaction's write lock and fails (database is locked): " +
		"write through idemhttp.SQLTx"
	hintReplay = "a retry with the same key and body must get the stored answer: mount the route behind env.Idempotent, " +
		"and answer with a status that idemhttp stores (Config.StoreStatus)"
	hintLost = "the handler's work must be done, on the request transaction, when the middleware answers, whether or not " +
		"the client reads the answer: an effect done once the answer is written (an after-response hook, code around " +
		"env.Idempotent that acts only while the client is still connected, or skips replays) is lost with the answer, " +
		"and the retry, a replay, does not do it. Do it in the handler, on the request transaction (idemhttp.SQLTx): " +
		"an outbox row for a message or an e-mail"
	hintNotBehind = "the answers did not come from the handler run behind env.Idempotent: a route mounted without it, " +
		"or an idempotency layer or replay cache of the service's own, whose writes do not commit with the key's record. " +
		"Mount the handler behind env.Idempotent and write on the request transaction (idemhttp.SQLTx)"
	hintRanAgain = "the handler ran more often than the answers say: code in front of env.Idempotent sends the request " +
		"through it again (a retry or shadow middleware, a fan-out under a derived key, the route mounted twice), and " +
		"each run under another key is one more effect. Send each request through env.Idempotent once, under its own key"
)

func (h *harness) run(i int, c Case) {
	h.t.Helper()
	for _, sc := range []func(int, Case) bool{h.sequential, h.concurrent, h.lostResponse,
		h.faulted(faultBeforeHandler), h.faulted(faultAfterHandler), h.faulted(faultBeforeRecord), h.faulted(faultAtCommit),
		h.mismatch, h.clientGivesUp} {
		if !sc(i, c) {
			return // one story per case: later scenarios would retell it
		}
	}
}

// first sends the first request of a scenario and checks it executed.
func (s *httpStory) first(ctx context.Context, label string) (answer, bool) {
	s.h.t.Helper()
	a := s.h.send(ctx, s.c, s.key, nil)
	s.step("%s: %s", label, a)
	if !s.c.statusOK(a.status) || a.replayed {
		s.fail(fmt.Sprintf("%s answered %s, want a fresh execution with status %s", label, a, s.c.wantStatus()), hintStatus)
		return a, false
	}
	return a, s.invariant(hintFirst)
}

// replays sends the request again and checks it replays prev without
// running the handler: runs is how many times it ran for the key so far.
func (s *httpStory) replays(ctx context.Context, label string, prev answer, prevLabel string, runs int) bool {
	s.h.t.Helper()
	b := s.h.send(ctx, s.c, s.key, nil)
	s.step("%s: %s", label, b)
	if !isReplayOf(b, prev) {
		s.fail(fmt.Sprintf("%s answered %s, want a replay of %s (same status and body, %s: true)", label, b, prevLabel, idemhttp.HeaderReplayed), hintReplay)
		return false
	}
	if !s.executed(runs, fmt.Sprintf("the executions before %s, which replays %s without running it", label, prevLabel)) {
		return false
	}
	return s.invariant(hintBeforeClaim)
}

// isReplayOf reports whether b is a replay of a: status and body byte
// for byte.
func isReplayOf(b, a answer) bool {
	return b.replayed && b.status == a.status && b.body == a.body
}

// executed checks that the handler ran want times behind env.Idempotent
// for the scenario's key so far; why is what the scenario's answers claim.
func (s *httpStory) executed(want int, why string) bool {
	s.h.t.Helper()
	got := s.h.executions(s.key)
	if got == want {
		return true
	}
	hint := hintRanAgain
	if got < want {
		hint = hintNotBehind
	}
	s.fail(fmt.Sprintf("the handler ran %d time(s) behind env.Idempotent for this key, want %d (%s)", got, want, why), hint)
	return false
}

func (h *harness) sequential(i int, c Case) bool {
	h.t.Helper()
	s := h.story(i, c, "sequential retry")
	ctx := context.Background()
	a, ok := s.first(ctx, "attempt 1")
	if !ok {
		return false
	}
	return s.replays(ctx, "attempt 2, same key and body", a, "attempt 1", 1)
}

func (h *harness) concurrent(i int, c Case) bool {
	h.t.Helper()
	s := h.story(i, c, "concurrent duplicates")
	ctx := context.Background()
	answers := make([]answer, Concurrency)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for n := range answers {
		wg.Go(func() {
			<-start
			answers[n] = h.send(ctx, c, s.key, nil)
		})
	}
	close(start)
	wg.Wait()
	var fresh []answer
	for n, a := range answers {
		s.step("racing attempt %d: %s", n+1, a)
		if !a.replayed && c.statusOK(a.status) {
			fresh = append(fresh, a)
		}
	}
	if len(fresh) != 1 {
		s.fail(fmt.Sprintf("%d of %d racing attempts were fresh executions with status %s, want exactly 1", len(fresh), Concurrency, c.wantStatus()), hintStatus)
		return false
	}
	for n, a := range answers {
		if !a.replayed && c.statusOK(a.status) {
			continue
		}
		if !isReplayOf(a, fresh[0]) && a.status != http.StatusConflict {
			s.fail(fmt.Sprintf("racing attempt %d answered %s, want a replay of the execution or 409", n+1, a), hintReplay)
			return false
		}
	}
	if !s.executed(1, "one racing attempt executed it, the others were replays or refused (409)") {
		return false
	}
	return s.invariant(hintOutside)
}

func (h *harness) lostResponse(i int, c Case) bool {
	h.t.Helper()
	s := h.story(i, c, "lost response")
	// The answer is lost on its way back: the connection closes as the
	// server writes it, the client never reads it, and retries.
	a := h.sendLost(c, s.key)
	s.step("attempt 1, its connection closed as the server answered: %s", a)
	if a.crashed || a.replayed || !c.statusOK(a.status) {
		s.fail(fmt.Sprintf("attempt 1 answered %s, want a fresh execution with status %s", a, c.wantStatus()), hintStatus)
		return false
	}
	if !s.invariant(hintLost) {
		return false
	}
	b := h.send(context.Background(), c, s.key, nil)
	s.step("attempt 2, the client's retry: %s", b)
	if !isReplayOf(b, a) {
		s.fail(fmt.Sprintf("the retry answered %s, want a replay of the answer the client did not read (status %d and the same body, "+
			"byte for byte, %s: true)", b, a.status, idemhttp.HeaderReplayed), hintReplay)
		return false
	}
	if !s.executed(1, "attempt 1 executed it, and the retry is a replay of its answer") {
		return false
	}
	return s.invariant(hintBeforeClaim)
}

// clientGivesUp: the client's context ends as the handler returns (its
// connection drops), so the answer is never read; whether the middleware
// still committed is a race it may win or lose. The retry must then be a
// replay or a fresh execution, never a second effect.
func (h *harness) clientGivesUp(i int, c Case) bool {
	h.t.Helper()
	s := h.story(i, c, "client gives up")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := h.send(context.WithValue(ctx, giveUpKey{}, cancel), c, s.key, nil)
	a.lost = true
	s.step("attempt 1, the client hung up as the handler returned: %s", a)
	if !s.executed(1, "attempt 1 ran it once, the client hanging up as it returned") {
		return false
	}
	if !s.invariant(hintOutside) {
		return false
	}
	b := h.send(context.Background(), c, s.key, nil)
	s.step("attempt 2, the client's retry: %s", b)
	if !c.statusOK(b.status) {
		s.fail(fmt.Sprintf("the retry answered %s, want status %s (a replay, or a fresh execution if attempt 1 recorded nothing)", b, c.wantStatus()), hintStatus)
		return false
	}
	runs, why := 2, "attempt 1 recorded nothing, and the retry is a fresh execution"
	if b.replayed {
		runs, why = 1, "attempt 1 was recorded, and the retry is a replay of it"
	}
	if !s.executed(runs, why) {
		return false
	}
	if !s.invariant(hintOutside) {
		return false
	}
	return s.replays(context.Background(), "attempt 3", b, "attempt 2", runs)
}

// giveUpKey carries, in a request's context, the client's cancel that
// observe calls when the handler returns.
type giveUpKey struct{}

// faulted returns the scenario that fails attempt 1 at f and retries.
func (h *harness) faulted(f fault) func(int, Case) bool {
	return func(i int, c Case) bool {
		h.t.Helper()
		s := h.story(i, c, "fault: "+f.String())
		ctx := context.Background()
		h.in.arm(f)
		a := h.send(ctx, c, s.key, nil)
		fired := h.in.disarm()
		s.step("attempt 1, %s: %s", f, a)
		if !fired {
			s.fail("the fault was never reached: the request did not go through the middleware's transaction", hintReplay)
			return false
		}
		if !a.crashed && a.status < 500 {
			s.fail(fmt.Sprintf("attempt 1 answered %s, want a 5xx (nothing recorded)", a), "")
			return false
		}
		hint, runs, why := hintOutside, 1, "attempt 1 ran it once before it failed"
		if f == faultBeforeHandler {
			hint, runs, why = hintBeforeClaim, 0, "BEGIN failed, so the key was not claimed and the handler must not run"
		}
		if !s.executed(runs, why) {
			return false
		}
		if !s.invariant(hint) {
			return false
		}
		b := h.send(ctx, c, s.key, nil)
		s.step("attempt 2, the retry: %s", b)
		if b.replayed || !c.statusOK(b.status) {
			s.fail(fmt.Sprintf("the retry answered %s, want a fresh execution with status %s (attempt 1 recorded nothing)", b, c.wantStatus()), hintStatus)
			return false
		}
		runs++
		if !s.executed(runs, "the retry is a fresh execution, which runs it once") {
			return false
		}
		if !s.invariant(hint) {
			return false
		}
		return s.replays(ctx, "attempt 3", b, "attempt 2", runs)
	}
}

// otherBody returns body changed: a JSON object gains a field, anything
// else gains a line.
func otherBody(body string) string {
	var m map[string]any
	if json.Unmarshal([]byte(body), &m) == nil && m != nil {
		m["idemtest_changed"] = true
		b, _ := json.Marshal(m)
		return string(b)
	}
	var buf bytes.Buffer
	buf.WriteString(body)
	buf.WriteString("\nidemtest-changed")
	return buf.String()
}

func (h *harness) mismatch(i int, c Case) bool {
	h.t.Helper()
	s := h.story(i, c, "same key, different body")
	ctx := context.Background()
	a, ok := s.first(ctx, "attempt 1")
	if !ok {
		return false
	}
	other := otherBody(c.Body)
	b := h.send(ctx, c, s.key, &other)
	s.step("attempt 2 with another body: %s", b)
	if b.status != http.StatusUnprocessableEntity {
		s.fail(fmt.Sprintf("attempt 2 answered %s, want 422 (the key was used for another request)", b), "")
		return false
	}
	if !s.executed(1, "attempt 2, another body under the key, is refused and must not run it") {
		return false
	}
	if !s.invariant(hintBeforeClaim) {
		return false
	}
	return s.replays(ctx, "attempt 3 with the original body", a, "attempt 1", 1)
}
