package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/outbox"
)

// errNotHeld is idemhttp's refusal of a record that is not held.
var errNotHeld = idemhttp.ErrNotHeld

// heldEffect is an effect waiting for an operator and why.
type heldEffect struct {
	effect.Effect
	Why string
}

// heldLimit bounds each list of held work.
const heldLimit = 500

// heldEffects returns the effects held for reconciliation: in_progress with
// an expired lease (the caller died or the Hold policy stopped the
// takeover; nobody knows whether the call happened) and failed ones.
func (c *Console[TTx]) heldEffects(r *http.Request) ([]heldEffect, error) {
	now := c.now()
	var out []heldEffect
	inProgress, err := c.ledger.List(r.Context(), effect.InProgress, heldLimit)
	if err != nil {
		return nil, err
	}
	for _, e := range inProgress {
		switch {
		case !e.HeldAt.IsZero(): // effect.WithKeyLifetime: never re-called with an expired key
			out = append(out, heldEffect{e, "held: " + e.LastError})
		case !e.LeaseUntil.After(now):
			out = append(out, heldEffect{e, "lease expired while in progress: the call may or may not have reached the provider"})
		}
	}
	failed, err := c.ledger.List(r.Context(), effect.Failed, heldLimit)
	if err != nil {
		return nil, err
	}
	for _, e := range failed {
		out = append(out, heldEffect{e, "failed: permanent error or attempts exhausted"})
	}
	return out, nil
}

// heldData is the held-work page's: held effects, HTTP keys and sagas.
func (c *Console[TTx]) heldData(r *http.Request) (map[string]any, error) {
	effects, err := c.heldEffects(r)
	if err != nil {
		return nil, err
	}
	keys, err := idemhttp.ListHeld(r.Context(), c.d, heldLimit)
	if err != nil {
		return nil, err
	}
	sagas, sagasOn, err := c.heldSagas(r.Context())
	if err != nil {
		return nil, err
	}
	return map[string]any{"Effects": effects, "Keys": keys, "Sagas": sagas, "SagasOn": sagasOn, "Now": c.now()}, nil
}

// heldAct serves POST /held/{effect|key|saga}/{resolve|release}.
func (c *Console[TTx]) heldAct(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	what, verb := r.PathValue("what"), r.PathValue("verb")
	if verb != "resolve" && verb != "release" {
		return badForm("unknown action %q", verb)
	}
	why, err := reason(r, true)
	if err != nil {
		return err
	}
	key := r.PostForm.Get("key")
	switch what {
	case "saga":
		err = c.heldSagaAct(r, verb, why)
	case "effect":
		if key == "" {
			return badForm("the effect key is missing")
		}
		target := "effect " + key
		if verb == "resolve" {
			result := formText(r, "result")
			err = c.audited(r, "held.effect.resolve", target, why, fmt.Sprintf("result %d bytes: %s", len(result), truncate(string(result), 200)),
				func() (string, error) { return "", c.ledger.Resolve(ctx, key, result) })
		} else {
			err = c.audited(r, "held.effect.release", target, why, "",
				func() (string, error) { return "", c.ledger.Retry(ctx, key) })
		}
	case "key":
		tenant, op := r.PostForm.Get("tenant"), r.PostForm.Get("operation")
		target := fmt.Sprintf("key %s / %s / %s", tenant, op, key)
		if verb == "resolve" {
			status, e := strconv.Atoi(strings.TrimSpace(r.PostForm.Get("status")))
			if e != nil || status < 100 || status > 599 {
				return badForm("status must be an HTTP status code (100–599)")
			}
			h := http.Header{}
			if ct := strings.TrimSpace(r.PostForm.Get("content_type")); ct != "" {
				h.Set("Content-Type", ct)
			}
			body := formText(r, "body")
			err = c.audited(r, "held.key.resolve", target, why, fmt.Sprintf("status %d, body %d bytes: %s", status, len(body), truncate(string(body), 200)),
				func() (string, error) {
					return "", idemhttp.ResolveHeld(ctx, c.d, idemhttp.Resolution{Tenant: tenant, Operation: op, Key: key,
						Status: status, Header: h, Body: body, CompletedAt: c.now()})
				})
		} else {
			err = c.audited(r, "held.key.release", target, why, "",
				func() (string, error) { return "", idemhttp.ReleaseHeld(ctx, c.d, tenant, op, key) })
		}
	default:
		return badForm("unknown kind %q", what)
	}
	if err != nil {
		return err
	}
	code := map[string]string{"resolve": "resolved", "release": "released"}[verb]
	c.done(w, r, "/held", url.Values{"done": {code}})
	return nil
}

func (c *Console[TTx]) keys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tenant, op, key := q.Get("tenant"), q.Get("operation"), q.Get("key")
	data := map[string]any{"Tenant": tenant, "Operation": op, "Key": key, "Now": c.now()}
	status := http.StatusOK
	if q.Has("key") {
		rec, err := idemhttp.Lookup(r.Context(), c.d, tenant, op, key)
		switch {
		case err == nil:
			data["Record"] = rec
			data["Expired"] = rec.Expired(c.now())
		default:
			data["LookupError"] = err.Error()
			status = statusOf(err)
		}
	}
	c.render(w, r, status, "keys", "Keys", data)
}

func (c *Console[TTx]) keyForget(w http.ResponseWriter, r *http.Request) error {
	tenant, op, key := r.PostForm.Get("tenant"), r.PostForm.Get("operation"), r.PostForm.Get("key")
	why, err := reason(r, true)
	if err != nil {
		return err
	}
	err = c.audited(r, "keys.forget", fmt.Sprintf("key %s / %s / %s", tenant, op, key), why, "", func() (string, error) {
		return "", idemhttp.Forget(r.Context(), c.d, tenant, op, key)
	})
	if err != nil {
		return err
	}
	c.done(w, r, "/keys", url.Values{"done": {"forgotten"}})
	return nil
}

// parkedGroup is the parked events of one ordering key.
type parkedGroup struct {
	Key    string
	Events []parkedView
}

type parkedView struct {
	outbox.ParkedEvent
	BlockedCount int64
	Blocked      []outbox.Event
}

// outboxData is the outbox page's: the stats and the parked events grouped
// by ordering key, each with what waits behind it (one statement for the
// page, not one per event).
func (c *Console[TTx]) outboxData(r *http.Request) (map[string]any, error) {
	ctx := r.Context()
	st, err := c.outbox.Stats(ctx)
	if err != nil {
		return nil, err
	}
	parked, err := c.outbox.ListParked(ctx, heldLimit)
	if err != nil {
		return nil, err
	}
	seqs := make([]int64, len(parked))
	for i, p := range parked {
		seqs[i] = p.Seq
	}
	blocked, err := c.outbox.BlockedBehindSeqs(ctx, seqs, 10)
	if err != nil {
		return nil, err
	}
	var groups []parkedGroup
	for _, p := range parked {
		if len(groups) == 0 || groups[len(groups)-1].Key != p.Key {
			groups = append(groups, parkedGroup{Key: p.Key})
		}
		g := &groups[len(groups)-1]
		b := blocked[p.Seq]
		g.Events = append(g.Events, parkedView{p, b.Count, b.Events})
	}
	return map[string]any{"Stats": st, "Groups": groups, "Now": c.now()}, nil
}

// outboxAct serves POST /outbox/{seq}/{retry|discard}.
func (c *Console[TTx]) outboxAct(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq <= 0 {
		return badForm("%q is not an outbox seq", r.PathValue("seq"))
	}
	why, _ := reason(r, false)
	target := fmt.Sprintf("outbox seq %d", seq)
	switch r.PathValue("verb") {
	case "retry":
		err = c.audited(r, "outbox.retry", target, why, "", func() (string, error) {
			n, err := c.outbox.RetryParked(ctx, seq)
			if err == nil && n == 0 {
				err = fmt.Errorf("%w: seq %d", outbox.ErrNotParkedEvent, seq)
			}
			return "", err
		})
		if err == nil {
			c.done(w, r, "/outbox", url.Values{"done": {"retried"}})
		}
	case "discard":
		err = c.audited(r, "outbox.discard", target, why, "", func() (string, error) {
			p, err := c.outbox.DiscardParked(ctx, seq)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("event id=%q type=%q topic=%q key=%q payload %d bytes: %s", p.ID, p.Type, p.Topic, p.Key,
				len(p.Payload), truncate(string(p.Payload), 2000)), nil
		})
		if err == nil {
			c.done(w, r, "/outbox", url.Values{"done": {"dropped"}})
		}
	default:
		return badForm("unknown action %q", r.PathValue("verb"))
	}
	return err
}

func (c *Console[TTx]) auditList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	before, _ := strconv.ParseInt(q.Get("before"), 10, 64)
	f := AuditFilter{Actor: q.Get("actor"), Action: q.Get("action"), BeforeID: before, Limit: 200}
	es, err := ListAudit(r.Context(), c.d, f)
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, ErrNoAuditTable) {
			status = http.StatusServiceUnavailable
		}
		c.renderError(w, r, status, "Audit", err.Error())
		return
	}
	var older int64
	if len(es) == f.Limit {
		older = es[len(es)-1].ID
	}
	c.render(w, r, http.StatusOK, "audit", "Audit", map[string]any{"Entries": es, "Filter": f, "Older": older})
}
