// Package conform probes an HTTP server, black-box, for the Idempotency-Key
// contract (draft-ietf-httpapi-idempotency-key-header with Stripe's rules):
// the first call executes; a retry is replayed byte for byte with the
// replay marker, also when its JSON body has its fields in another order;
// concurrent retries execute once; a changed payload answers 422; a
// missing or malformed key answers 400; another tenant's request with the
// same key is independent; a 5xx is not stored. It is the engine of
// "idem conform".
//
// Every probe uses fresh random keys, so a run never depends on an earlier
// one; it does create real effects on the target (one per key it uses).
package conform

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Result is the outcome of one check.
type Result string

// Results of a check. A check that cannot run against this target (no way
// to provoke a 5xx, one tenant only) is SKIP with the reason, never PASS.
const (
	Pass Result = "PASS"
	Fail Result = "FAIL"
	Skip Result = "SKIP"
)

// Check is one probe and what it saw.
type Check struct {
	Name   string `json:"name"`
	Result Result `json:"result"`
	// Saw says what the target answered (or why the check was skipped).
	Saw string `json:"saw"`
}

// Report is a whole run; its JSON form is the --json output.
type Report struct {
	Target  string  `json:"target"`
	Route   string  `json:"route"`
	Checks  []Check `json:"checks"`
	Passed  int     `json:"passed"`
	Failed  int     `json:"failed"`
	Skipped int     `json:"skipped"`
}

// OK reports whether no check failed.
func (r Report) OK() bool { return r.Failed == 0 }

// Config is what to probe.
type Config struct {
	// URL is the target's base URL (http://host:port[/prefix]).
	URL string
	// Method and Path are the route under test; default POST /orders.
	Method, Path string
	// Body is the request body (JSON, sent as application/json); it must
	// be a request the target accepts. Defaults to a small JSON object.
	Body []byte
	// ContentType of Body; defaults to application/json.
	ContentType string
	// TenantHeader and Tenants: every probe runs as Tenants[0]; the
	// tenant check needs two tenants.
	TenantHeader string
	Tenants      []string
	// Header is added to every request (authentication, API version).
	Header http.Header
	// FailHeader, when set, is a header the target answers with a 5xx
	// (for example the example upstream's "X-Upstream-Fail: 500"); without
	// it the 5xx check is skipped.
	FailHeader http.Header
	// Concurrency is the number of simultaneous retries of the concurrency
	// check; default 8.
	Concurrency int
	// Client sends the requests; default a client with a 30s timeout.
	Client *http.Client
}

// DefaultBody is the body sent when Config.Body is empty.
const DefaultBody = `{"amount":1000,"currency":"EUR","description":"idem conform probe"}`

// Checks lists the checks in the order they run.
var Checks = []string{
	"first_call", "replay_identical", "replay_marker", "reordered_json", "concurrent_retries",
	"changed_payload_422", "missing_key_400", "malformed_keys_400", "other_tenant_independent", "5xx_not_stored",
}

type prober struct {
	cfg    Config
	target string
	run    string
	n      int
	mu     sync.Mutex
}

type reply struct {
	status int
	header http.Header
	body   []byte
	err    error
}

func (r reply) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

func (r reply) String() string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	s := strconv.Itoa(r.status) + " " + http.StatusText(r.status) + ", " + strconv.Itoa(len(r.body)) + " bytes"
	if r.replayed() {
		s += ", Idempotent-Replayed: true"
	}
	return s
}

// Run probes the target and returns the report. It fails only on a
// configuration error (bad URL); everything the target does is a result.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Method == "" {
		cfg.Method = http.MethodPost
	}
	if cfg.Path == "" {
		cfg.Path = "/orders"
	}
	if len(cfg.Body) == 0 {
		cfg.Body = []byte(DefaultBody)
	}
	if cfg.ContentType == "" {
		cfg.ContentType = "application/json"
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 30 * time.Second}
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Report{}, errors.New("conform: the target must be an http:// or https:// URL")
	}
	p := &prober{cfg: cfg, target: strings.TrimRight(cfg.URL, "/") + cfg.Path}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	p.run = hex.EncodeToString(b)
	rep := Report{Target: cfg.URL, Route: cfg.Method + " " + cfg.Path}
	add := func(name string, res Result, saw string, args ...any) {
		rep.Checks = append(rep.Checks, Check{Name: name, Result: res, Saw: fmt.Sprintf(saw, args...)})
	}

	// first_call, replay_identical, replay_marker
	k1 := p.key()
	first := p.send(ctx, k1, cfg.Body, nil)
	firstOK := first.err == nil && first.status >= 200 && first.status < 300
	switch {
	case !firstOK:
		add("first_call", Fail, "%s; want 2xx (is --body a request the target accepts?)", first)
	case first.replayed():
		add("first_call", Fail, "%s: a new key was answered as a replay", first)
	default:
		add("first_call", Pass, "%s", first)
	}
	var retry reply
	if firstOK {
		retry = p.send(ctx, k1, cfg.Body, nil)
		if retry.err == nil && retry.status == first.status && bytes.Equal(retry.body, first.body) {
			add("replay_identical", Pass, "%s, body identical to the first answer", retry)
		} else {
			add("replay_identical", Fail, "%s; want %d with the first answer's %d bytes (%s)", retry, first.status, len(first.body), diff(first.body, retry.body))
		}
		if retry.replayed() && !first.replayed() {
			add("replay_marker", Pass, "retry carries Idempotent-Replayed: true, the first answer does not")
		} else {
			add("replay_marker", Fail, "first answer Idempotent-Replayed=%q, retry %q; want none then true",
				first.header.Get("Idempotent-Replayed"), retry.header.Get("Idempotent-Replayed"))
		}
	} else {
		add("replay_identical", Skip, "the first call failed")
		add("replay_marker", Skip, "the first call failed")
	}

	// reordered_json
	switch reordered, why := reorder(cfg.Body); {
	case !firstOK:
		add("reordered_json", Skip, "the first call failed")
	case why != "":
		add("reordered_json", Skip, "%s", why)
	default:
		r := p.send(ctx, k1, reordered, nil)
		if r.err == nil && r.status == first.status && bytes.Equal(r.body, first.body) && r.replayed() {
			add("reordered_json", Pass, "fields reordered and re-spaced: %s, replayed", r)
		} else {
			add("reordered_json", Fail, "fields reordered and re-spaced: %s; want the first answer replayed (JSON bodies compared canonically)", r)
		}
	}

	// concurrent_retries
	k2 := p.key()
	replies := make([]reply, cfg.Concurrency)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range replies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			replies[i] = p.send(ctx, k2, cfg.Body, nil)
		}()
	}
	close(start)
	wg.Wait()
	final := p.send(ctx, k2, cfg.Body, nil)
	add(checkConcurrent(replies, final))

	// changed_payload_422
	if firstOK {
		r := p.send(ctx, k1, changed(cfg.Body), nil)
		if r.err == nil && r.status == http.StatusUnprocessableEntity {
			add("changed_payload_422", Pass, "%s", r)
		} else {
			add("changed_payload_422", Fail, "%s; want 422 for the first key with a changed body", r)
		}
	} else {
		add("changed_payload_422", Skip, "the first call failed")
	}

	// missing_key_400
	if r := p.send(ctx, "", cfg.Body, nil); r.err == nil && r.status == http.StatusBadRequest {
		add("missing_key_400", Pass, "%s", r)
	} else {
		add("missing_key_400", Fail, "%s; want 400 without an Idempotency-Key", r)
	}

	// malformed_keys_400
	var bad []string
	var saw []string
	for _, m := range []struct {
		name   string
		values []string
	}{
		{"empty", []string{`""`}},
		{"unterminated quote", []string{`"` + p.key()}},
		{"256 characters", []string{`"` + strings.Repeat("k", 256) + `"`}},
		{"two headers", []string{`"` + p.key() + `"`, `"` + p.key() + `"`}},
	} {
		h := http.Header{"Idempotency-Key": m.values}
		r := p.sendRaw(ctx, cfg.Body, h, cfg.Tenant0())
		saw = append(saw, m.name+" "+strconv.Itoa(r.status))
		if r.err != nil || r.status != http.StatusBadRequest {
			bad = append(bad, m.name+": "+r.String())
		}
	}
	if len(bad) == 0 {
		add("malformed_keys_400", Pass, "%s", strings.Join(saw, ", "))
	} else {
		add("malformed_keys_400", Fail, "%s; want 400 for each", strings.Join(bad, "; "))
	}

	// other_tenant_independent
	switch {
	case cfg.TenantHeader == "" || len(cfg.Tenants) < 2:
		add("other_tenant_independent", Skip, "needs --tenant-header NAME --tenants a,b")
	default:
		k3 := p.key()
		a := p.sendAs(ctx, k3, cfg.Body, nil, cfg.Tenants[0])
		b := p.sendAs(ctx, k3, cfg.Body, nil, cfg.Tenants[1])
		switch {
		case a.err != nil || a.status < 200 || a.status >= 300:
			add("other_tenant_independent", Fail, "tenant %s: %s; want 2xx", cfg.Tenants[0], a)
		case b.err != nil || b.status < 200 || b.status >= 300 || b.replayed():
			add("other_tenant_independent", Fail, "tenant %s with tenant %s's key: %s; want a fresh 2xx, not a replay", cfg.Tenants[1], cfg.Tenants[0], b)
		default:
			add("other_tenant_independent", Pass, "same key: tenant %s %s; tenant %s %s, not replayed", cfg.Tenants[0], a, cfg.Tenants[1], b)
		}
	}

	// 5xx_not_stored
	if len(cfg.FailHeader) == 0 {
		add("5xx_not_stored", Skip, "no way to provoke a 5xx: give --fail-header K:V, a header the target answers with a 5xx")
	} else {
		k4 := p.key()
		f := p.send(ctx, k4, cfg.Body, cfg.FailHeader)
		if f.err != nil || f.status < 500 {
			add("5xx_not_stored", Fail, "with the fail header: %s; want a 5xx", f)
		} else {
			r := p.send(ctx, k4, cfg.Body, nil)
			if r.err == nil && r.status >= 200 && r.status < 300 && !r.replayed() {
				add("5xx_not_stored", Pass, "with the fail header %s; retry %s, executed", f, r)
			} else {
				add("5xx_not_stored", Fail, "with the fail header %s; retry %s; want the retry executed (2xx, not replayed)", f, r)
			}
		}
	}

	for _, c := range rep.Checks {
		switch c.Result {
		case Pass:
			rep.Passed++
		case Fail:
			rep.Failed++
		case Skip:
			rep.Skipped++
		}
	}
	return rep, nil
}

// Tenant0 is the tenant of every probe but the tenant check ("" for none).
func (c Config) Tenant0() string {
	if len(c.Tenants) > 0 {
		return c.Tenants[0]
	}
	return ""
}

func checkConcurrent(rs []reply, final reply) (string, Result, string) {
	const name = "concurrent_retries"
	var executed, replays, inflight int
	var body []byte
	distinct := map[string]bool{}
	var other []string
	for _, r := range rs {
		switch {
		case r.err != nil || r.status >= 500:
			other = append(other, r.String())
		case r.status == http.StatusConflict:
			inflight++
		case r.status >= 200 && r.status < 300:
			distinct[string(r.body)] = true
			body = r.body
			if r.replayed() {
				replays++
			} else {
				executed++
			}
		default:
			other = append(other, r.String())
		}
	}
	if len(distinct) > 1 {
		other = append(other, fmt.Sprintf("%d different 2xx bodies", len(distinct)))
	}
	saw := fmt.Sprintf("%d simultaneous: %d executed, %d replayed, %d answered 409 in progress", len(rs), executed, replays, inflight)
	switch {
	case len(other) > 0:
		return name, Fail, saw + "; unexpected: " + strings.Join(other, "; ")
	case executed != 1:
		return name, Fail, saw + "; want exactly one execution"
	case final.err != nil || !final.replayed() || !bytes.Equal(final.body, body):
		return name, Fail, saw + "; a later retry: " + final.String() + ", want the executed answer replayed"
	}
	return name, Pass, saw + "; a later retry replays it"
}

func (p *prober) key() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	return "conform-" + p.run + "-" + strconv.Itoa(p.n)
}

func (p *prober) send(ctx context.Context, key string, body []byte, extra http.Header) reply {
	return p.sendAs(ctx, key, body, extra, p.cfg.Tenant0())
}

func (p *prober) sendAs(ctx context.Context, key string, body []byte, extra http.Header, tenant string) reply {
	h := http.Header{}
	if key != "" {
		h.Set("Idempotency-Key", `"`+key+`"`)
	}
	for k, v := range extra {
		h[k] = v
	}
	return p.sendRaw(ctx, body, h, tenant)
}

func (p *prober) sendRaw(ctx context.Context, body []byte, h http.Header, tenant string) reply {
	req, err := http.NewRequestWithContext(ctx, p.cfg.Method, p.target, bytes.NewReader(body))
	if err != nil {
		return reply{err: err}
	}
	for k, v := range p.cfg.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", p.cfg.ContentType)
	if p.cfg.TenantHeader != "" && tenant != "" {
		req.Header.Set(p.cfg.TenantHeader, tenant)
	}
	for k, v := range h {
		req.Header[http.CanonicalHeaderKey(k)] = v
	}
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return reply{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// reorder returns body with its top-level fields in reverse order and
// other whitespace, or why it cannot.
func reorder(body []byte) ([]byte, string) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, "the body is not a JSON object"
	}
	type field struct {
		k string
		v json.RawMessage
	}
	var fs []field
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, "the body is not valid JSON"
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, "the body is not valid JSON"
		}
		fs = append(fs, field{t.(string), v})
	}
	if len(fs) < 2 {
		return nil, "the body has fewer than two top-level fields to reorder"
	}
	var b bytes.Buffer
	b.WriteString("{\n")
	for i := len(fs) - 1; i >= 0; i-- {
		k, _ := json.Marshal(fs[i].k)
		b.WriteString("  ")
		b.Write(k)
		b.WriteString(" : ")
		b.Write(fs[i].v)
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	return b.Bytes(), ""
}

// changed returns body with one more field (a JSON object) or one more
// byte (anything else), so its fingerprint differs.
func changed(body []byte) []byte {
	t := bytes.TrimSpace(body)
	if len(t) >= 2 && t[0] == '{' && t[len(t)-1] == '}' {
		inner := bytes.TrimSpace(t[1 : len(t)-1])
		if len(inner) == 0 {
			return []byte(`{"idem_conform_changed":true}`)
		}
		return append(append([]byte(`{"idem_conform_changed":true,`), inner...), '}')
	}
	return append(append([]byte{}, body...), ' ', 'x')
}

func diff(a, b []byte) string {
	if bytes.Equal(a, b) {
		return "same body"
	}
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return "bodies differ at byte " + strconv.Itoa(i)
		}
	}
	return "bodies differ in length"
}

// WriteTable writes the report as a table: one line per check with its
// result and what it saw, then the totals.
func (r Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "idem conform %s %s\n\n", r.Target, r.Route)
	width := len("CHECK")
	for _, c := range r.Checks {
		width = max(width, len(c.Name))
	}
	fmt.Fprintf(&b, "%-*s  %-6s %s\n", width, "CHECK", "RESULT", "SAW")
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "%-*s  %-6s %s\n", width, c.Name, c.Result, c.Saw)
	}
	fmt.Fprintf(&b, "\n%d passed, %d failed, %d skipped\n", r.Passed, r.Failed, r.Skipped)
	_, err := io.WriteString(w, b.String())
	return err
}
