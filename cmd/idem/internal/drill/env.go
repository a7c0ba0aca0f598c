package drill

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/internal/httpserver"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/webhook"
)

// drillSecret signs the drill's payment webhooks.
const drillSecret = "whsec_ZHJpbGwtc2VjcmV0LWZvci1pZGVtLWJveG9mZmljZQ=="

// duplicateWindow is the drill streams' duplicate window: short, so a
// relay republish after it and an operator redrive reach the consumers
// (whose inboxes must absorb them) instead of being dropped by the broker.
const duplicateWindow = 500 * time.Millisecond

type runner struct {
	cfg    Config
	tmp    string
	ownTmp bool
	seq    int
	kafka  kafkaCluster // the in-process cluster of --broker kafka without --kafka
}

func newRunner(cfg Config) (*runner, error) {
	r := &runner{cfg: cfg, tmp: cfg.TempDir}
	if r.tmp == "" {
		dir, err := os.MkdirTemp("", "idem-drill-*")
		if err != nil {
			return nil, err
		}
		r.tmp, r.ownTmp = dir, true
	}
	return r, nil
}

func (r *runner) close() {
	r.closeBroker()
	if r.ownTmp {
		_ = os.RemoveAll(r.tmp)
	}
}

// small is the size of the focused scenarios, recorded in res.Orders so
// the report says why a scenario placed fewer orders than --orders.
func (r *runner) small(res *Result) int {
	m := min(max(r.cfg.Orders/10, 20), 200)
	res.Orders = m
	return m
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// env is one scenario's running system and its HTTP front.
type env struct {
	r       *runner
	opts    boxoffice.Options
	sys     *boxoffice.System[any]
	extra   []*boxoffice.System[any]
	srv     *httptest.Server
	url     string
	client  *http.Client
	signer  *webhook.Standard
	cleanup []func()
	events  enqueued // the OrderConfirmed events the API enqueued, for the projection report
}

// enqueued records the OrderConfirmed events of a scenario per concert
// (boxoffice.Hooks.Enqueued): which events exist, so the projection
// report can ask their owners where each one is.
type enqueued struct {
	mu        sync.Mutex
	byConcert map[string][]event
}

// event is one enqueued OrderConfirmed event.
type event struct {
	source, id string
	version    int64
}

// record is the boxoffice.Hooks.Enqueued hook.
func (q *enqueued) record(oc boxoffice.OrderConfirmed, ev outbox.Event) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.byConcert == nil {
		q.byConcert = map[string][]event{}
	}
	q.byConcert[oc.EventID] = append(q.byConcert[oc.EventID], event{source: ev.Source, id: ev.ID, version: oc.EventVersion})
}

// of returns concert's events, oldest version first.
func (q *enqueued) of(concert string) []event {
	q.mu.Lock()
	evs := slices.Clone(q.byConcert[concert])
	q.mu.Unlock()
	slices.SortFunc(evs, func(a, b event) int { return cmp.Compare(a.version, b.version) })
	return evs
}

// newEnv opens a fresh system for scenario name. mod adjusts the options
// before Open; start=false leaves the background components stopped.
func (r *runner) newEnv(ctx context.Context, name string, start bool, mod func(*boxoffice.Options)) (_ *env, err error) {
	r.seq++
	e := &env{r: r}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	o := boxoffice.Options{
		DataDir:           filepath.Join(r.tmp, fmt.Sprintf("%02d-%s", r.seq, name)),
		SQLiteSynchronous: "NORMAL",
		Duplicates:        duplicateWindow,
		AckWait:           time.Second,
		Config: boxoffice.Config{
			WebhookSecrets:    []string{drillSecret},
			PollInterval:      20 * time.Millisecond,
			RetryBase:         20 * time.Millisecond,
			RetryMax:          300 * time.Millisecond,
			EffectLease:       3 * time.Second,
			EffectCallTimeout: time.Second,
			RelayClaimTTL:     3 * time.Second,
			Logger:            r.cfg.Logger,
		},
	}
	if r.cfg.DatabaseURL != "" {
		cleanup, err := r.scenarioDB(ctx, &o)
		if err != nil {
			return nil, err
		}
		e.cleanup = append(e.cleanup, cleanup)
	}
	cleanup, err := r.scenarioBroker(ctx, &o)
	if err != nil {
		return nil, err
	}
	if cleanup != nil {
		e.cleanup = append(e.cleanup, cleanup)
	}
	if mod != nil {
		mod(&o)
	}
	o.Config.Hooks.Enqueued = chainEnqueued(o.Config.Hooks.Enqueued, e.events.record)
	e.opts = o
	e.sys, err = boxoffice.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	if start {
		if err := e.sys.Start(ctx); err != nil {
			return nil, err
		}
	}
	if e.sys.Handler() != nil {
		e.srv = httptest.NewUnstartedServer(nil)
		e.srv.Config = httpserver.New("", e.sys.Handler())
		e.srv.Start()
		e.url = e.srv.URL
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	e.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	e.signer, err = webhook.NewStandard(webhook.StandardConfig{Secrets: []string{drillSecret}})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// addSystem starts another system on the scenario's database and broker
// (another deployment of some components).
func (e *env) addSystem(ctx context.Context, mod func(*boxoffice.Config)) (*boxoffice.System[any], error) {
	cfg := e.sys.Config()
	cfg.Registry = nil
	cfg.Hooks = boxoffice.Hooks{}
	if mod != nil {
		mod(&cfg)
	}
	cfg.Hooks.Enqueued = chainEnqueued(cfg.Hooks.Enqueued, e.events.record)
	s, err := boxoffice.New(ctx, e.sys.DB(), cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	e.extra = append(e.extra, s)
	return s, nil
}

// chainEnqueued runs a scenario's Enqueued hook (if any), then the
// drill's record.
func chainEnqueued(h, record func(boxoffice.OrderConfirmed, outbox.Event)) func(boxoffice.OrderConfirmed, outbox.Event) {
	if h == nil {
		return record
	}
	return func(oc boxoffice.OrderConfirmed, ev outbox.Event) { h(oc, ev); record(oc, ev) }
}

func (e *env) close() {
	if e.srv != nil {
		e.srv.Close()
	}
	for _, s := range e.extra {
		_ = s.Close()
	}
	if e.sys != nil {
		_ = e.sys.Close()
	}
	for i := len(e.cleanup) - 1; i >= 0; i-- {
		e.cleanup[i]()
	}
}

// reply is one HTTP answer.
type reply struct {
	status   int
	header   http.Header
	body     []byte
	replayed bool
}

func (e *env) do(ctx context.Context, method, path, tenant, key string, body []byte, hdr http.Header) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, method, e.url+path, bytes.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if tenant != "" {
		req.Header.Set("X-Tenant-ID", tenant)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}, nil
}

// postOrder sends POST /orders.
func (e *env) postOrder(ctx context.Context, tenant, key string, body []byte) (reply, error) {
	return e.do(ctx, http.MethodPost, "/orders", tenant, key, body, nil)
}

// orderBody is the JSON body of order i on event.
func orderBody(i int, event string) []byte {
	return fmt.Appendf(nil, `{"event_id":%q,"customer_email":"customer-%d@example.com","seats":%d,"total_cents":%d,"currency":"EUR"}`,
		event, i, 1+i%4, 2500*(1+i%4))
}

// sendPayment posts a signed payment webhook with delivery id id.
func (e *env) sendPayment(ctx context.Context, id, orderID string, sign bool) (reply, error) {
	body := fmt.Appendf(nil, `{"type":"payment.succeeded","data":{"order_id":%q}}`, orderID)
	h := http.Header{}
	if sign {
		if err := e.signer.Sign(h, webhook.Delivery{ID: id}, body); err != nil {
			return reply{}, err
		}
	} else {
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", fmt.Sprint(time.Now().Unix()))
		h.Set("webhook-signature", "v1,bm90IGEgc2lnbmF0dXJl")
	}
	return e.do(ctx, http.MethodPost, "/webhooks/payments", "", "", body, h)
}
