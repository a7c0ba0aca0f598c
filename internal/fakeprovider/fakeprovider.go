// Package fakeprovider is a fake third-party provider (an e-mail API) for
// tests, the demo and the drills: an HTTP server that honours the
// Idempotency-Key header the way Stripe-style APIs do, counts raw calls
// versus unique effects, and can be told to misbehave (fail, be slow, or
// time out after performing the effect).
//
// The API is POST /emails with any body:
//
//   - a new Idempotency-Key performs the effect once, stores the response and
//     answers 200 with {"id":"em_…","key":"…","status":"sent"};
//   - the same key with the same body answers the stored response again
//     (header Idempotent-Replayed: true) and performs nothing;
//   - the same key with a different body answers 422 and performs nothing;
//   - no key performs a new effect on every call (what a non-idempotent
//     provider does), unless [Config.RequireKey] is set (then 400).
//
// GET /stats answers {"calls":…,"unique_effects":…} for the demo.
//
// A payment API for the saga drills, POST /charges and POST /refunds, keeps
// its own calls and effects (see [Provider.PaymentTotals]) and honours keys
// the same way; a refund that overtakes its charge cancels the charge key.
// Faults name their endpoint ([Fault.On]).
//
// The invariant the drills check is [Provider.UniqueEffects] equal to the
// number of intended effects, however many raw calls ([Provider.Calls]) the
// retries produced. A Provider is safe for concurrent use.
package fakeprovider

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/idemkit/idem/internal/httpserver"
	"github.com/idemkit/idem/internal/problem"
)

// Config configures a Provider. The zero value is ready to use.
type Config struct {
	// Addr is the listen address of [Provider.Start]. Defaults to
	// "127.0.0.1:0" (a free port).
	Addr string
	// RequireKey answers 400 to calls without an Idempotency-Key instead of
	// performing a new effect for each of them. Defaults to false.
	RequireKey bool
	// MaxBodyBytes caps the request body (413 above it). Defaults to 1 MiB.
	MaxBodyBytes int64
	// Logger receives one debug line per call. Defaults to discarding.
	Logger *slog.Logger
}

// AfterEffect says what the provider does once it has performed an effect.
type AfterEffect int

const (
	// Respond answers normally (the default).
	Respond AfterEffect = iota
	// Hang performs the effect, then holds the response until the client
	// gives up (its timeout), [Fault.Hang] elapses or the provider closes:
	// the client sees a timeout although the effect happened.
	Hang
	// Drop performs the effect, then drops the connection without an answer.
	Drop
)

// Endpoint names the API a [Fault] applies to.
type Endpoint string

// The endpoints of the provider.
const (
	Emails  Endpoint = ""        // POST /emails (the default)
	Charges Endpoint = "charges" // POST /charges (payment API)
	Refunds Endpoint = "refunds" // POST /refunds (payment API)
)

// Fault is one injected misbehaviour; see [Provider.Inject].
type Fault struct {
	// On is the endpoint whose calls the fault applies to. Defaults to
	// [Emails]; faults of other endpoints are skipped over, not consumed.
	On Endpoint
	// Times is how many calls the fault applies to; a negative value applies
	// it to every call until [Provider.Reset]. Zero means one call.
	Times int
	// Status, when non-zero, answers this status (e.g. 503, 400) without
	// performing the effect.
	Status int
	// Delay is slept before the call is handled (a slow provider). The
	// effect is performed after it even if the client has gone away.
	Delay time.Duration
	// After says what happens once the effect is performed (ignored with
	// Status).
	After AfterEffect
	// Hang bounds [Hang]. Defaults to one minute.
	Hang time.Duration
}

// Call is one raw request the provider received.
type Call struct {
	Key      string    // Idempotency-Key, "" if none
	Body     []byte    // the request body
	Status   int       // status answered (0 when the connection was dropped)
	Replayed bool      // the stored response of an earlier effect was answered
	Fault    bool      // an injected fault shaped the answer
	At       time.Time // when the call arrived
}

// Effect is one unique effect the provider performed.
type Effect struct {
	ID     string    // provider-assigned id, "em_1", "em_2", …
	Key    string    // Idempotency-Key, "" for a keyless call
	Body   []byte    // the request body that performed it
	Result []byte    // the stored response body
	Calls  int       // raw calls that carried this key (1 + replays + conflicts)
	At     time.Time // when it was performed
}

// Provider is the fake provider. Create it with [New]; serve it with
// [Provider.Start] or mount [Provider.Handler] in an httptest.Server.
type Provider struct {
	cfg Config
	log *slog.Logger

	mu        sync.Mutex         // protects the fields below
	calls     []Call             // every raw call
	effects   map[string]*effect // by Idempotency-Key
	keyless   []*effect          // effects of calls without a key
	seq       int                // last effect id number
	faults    []Fault            // pending faults, head first
	pay       payments           // the payment API's state
	latency   time.Duration      // slept before every call
	srv       *http.Server
	ln        net.Listener
	closing   chan struct{} // closed by Close; releases hanging calls
	closeOnce sync.Once
}

type effect struct {
	Effect
	fp [sha256.Size]byte
}

// New returns a Provider; it does not listen until [Provider.Start].
func New(cfg Config) *Provider {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Provider{
		cfg:     cfg,
		log:     log.With("component", "fakeprovider"),
		effects: map[string]*effect{},
		closing: make(chan struct{}),
	}
}

// Start listens on [Config.Addr] and serves in a goroutine owned by the
// Provider until [Provider.Close]. Starting twice is an error.
func (p *Provider) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv != nil {
		return errors.New("fakeprovider: already started")
	}
	ln, err := net.Listen("tcp", p.cfg.Addr)
	if err != nil {
		return fmt.Errorf("fakeprovider: %w", err)
	}
	p.ln = ln
	p.srv = httpserver.New("", p.Handler())
	go func() { _ = p.srv.Serve(ln) }()
	return nil
}

// URL returns the base URL ("http://127.0.0.1:port") once started, "" before.
func (p *Provider) URL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return ""
	}
	return "http://" + p.ln.Addr().String()
}

// Close releases hanging calls and stops the server started by Start. It is
// safe to call more than once; the recorded calls and effects remain readable.
func (p *Provider) Close() error {
	p.closeOnce.Do(func() { close(p.closing) })
	p.mu.Lock()
	srv := p.srv
	p.mu.Unlock()
	if srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return srv.Close()
	}
	return nil
}

// Inject queues a fault; queued faults apply to the next calls in order.
func (p *Provider) Inject(f Fault) {
	if f.Times == 0 {
		f.Times = 1
	}
	if f.Hang <= 0 {
		f.Hang = time.Minute
	}
	p.mu.Lock()
	p.faults = append(p.faults, f)
	p.mu.Unlock()
}

// FailNext makes the next n calls answer status without performing the
// effect (503 for a transient outage, 400 for a rejection).
func (p *Provider) FailNext(n, status int) { p.Inject(Fault{Times: n, Status: status}) }

// FailAlways makes every call answer status without performing the effect,
// until [Provider.Reset].
func (p *Provider) FailAlways(status int) { p.Inject(Fault{Times: -1, Status: status}) }

// TimeoutAfterEffect makes the next n calls perform the effect and then hang
// until the client times out (the drill's provider time-out scenario).
func (p *Provider) TimeoutAfterEffect(n int) { p.Inject(Fault{Times: n, After: Hang}) }

// DropAfterEffect makes the next n calls perform the effect and then drop
// the connection without answering.
func (p *Provider) DropAfterEffect(n int) { p.Inject(Fault{Times: n, After: Drop}) }

// SetLatency makes every call sleep d before it is handled (a slow
// provider); 0 turns it off. The effect is performed after the sleep even if
// the client has gone away, as real providers do.
func (p *Provider) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Reset removes every queued fault and the latency; recorded calls and
// effects are kept.
func (p *Provider) Reset() {
	p.mu.Lock()
	p.faults = nil
	p.latency = 0
	p.mu.Unlock()
}

// Calls returns the number of raw calls received on POST /emails.
func (p *Provider) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

// CallLog returns a copy of every raw call, in arrival order.
func (p *Provider) CallLog() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return cloneCalls(p.calls)
}

// cloneCalls copies a call log, bodies included.
func cloneCalls(calls []Call) []Call {
	out := make([]Call, len(calls))
	for i, c := range calls {
		c.Body = bytes.Clone(c.Body)
		out[i] = c
	}
	return out
}

// UniqueEffects returns the number of effects performed: one per distinct
// Idempotency-Key plus one per keyless call.
func (p *Provider) UniqueEffects() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.effects) + len(p.keyless)
}

// Effects returns a copy of the keyed effects, by Idempotency-Key.
func (p *Provider) Effects() map[string]Effect {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]Effect, len(p.effects))
	for k, e := range p.effects {
		c := e.Effect
		c.Body, c.Result = bytes.Clone(c.Body), bytes.Clone(c.Result)
		out[k] = c
	}
	return out
}

// Effect returns the effect performed for key, if any.
func (p *Provider) Effect(key string) (Effect, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.effects[key]
	if !ok {
		return Effect{}, false
	}
	c := e.Effect
	c.Body, c.Result = bytes.Clone(c.Body), bytes.Clone(c.Result)
	return c, true
}

// Handler returns the provider's HTTP handler (POST /emails, GET /stats and
// the payment API: POST /charges, POST /refunds).
func (p *Provider) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /emails", p.serveSend)
	mux.HandleFunc("POST /charges", p.serveCharge)
	mux.HandleFunc("POST /refunds", p.serveRefund)
	mux.HandleFunc("GET /stats", p.serveStats)
	return mux
}

func (p *Provider) serveStats(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	calls, unique := len(p.calls), len(p.effects)+len(p.keyless)
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int{"calls": calls, "unique_effects": unique})
}

// nextFault pops the first fault queued for endpoint on (nil when none)
// and returns it with the latency.
func (p *Provider) nextFault(on Endpoint) (*Fault, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.faults {
		if p.faults[i].On != on {
			continue
		}
		f := p.faults[i]
		if f.Times > 0 {
			p.faults[i].Times--
			if p.faults[i].Times == 0 {
				p.faults = append(p.faults[:i], p.faults[i+1:]...)
			}
		}
		return &f, p.latency
	}
	return nil, p.latency
}

func (p *Provider) serveSend(w http.ResponseWriter, r *http.Request) {
	p.serve(w, r, Emails, p.cfg.RequireKey, p.perform)
}

// perform performs or replays an e-mail effect atomically; call is
// appended to the call log under the same lock.
func (p *Provider) perform(key string, body []byte, call Call) (status int, result []byte, replayed bool) {
	fp := sha256.Sum256(body)
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() {
		call.Status, call.Replayed = status, replayed
		p.calls = append(p.calls, call)
	}()
	if key != "" {
		if e, ok := p.effects[key]; ok {
			return replay(&e.Calls, e.fp, fp, bytes.Clone(e.Result))
		}
	}
	p.seq++
	id := fmt.Sprintf("em_%d", p.seq)
	res, _ := json.Marshal(map[string]string{"id": id, "key": key, "status": "sent"})
	e := &effect{Effect: Effect{ID: id, Key: key, Body: bytes.Clone(body), Result: res, Calls: 1, At: call.At}, fp: fp}
	if key == "" {
		p.keyless = append(p.keyless, e)
	} else {
		p.effects[key] = e
	}
	return http.StatusOK, bytes.Clone(res), false
}

func (p *Provider) record(on Endpoint, c Call) {
	c.Body = bytes.Clone(c.Body)
	p.mu.Lock()
	if on == Emails {
		p.calls = append(p.calls, c)
	} else {
		p.pay.calls = append(p.pay.calls, c)
	}
	p.mu.Unlock()
}

// writeProblem answers an RFC 9457 problem document through idem's one writer.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	problem.Write(w, status, problem.Details{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail}, 0)
}
