package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/dlq"
)

// letterFilter is the dead-letter filter form: dlq.Filter's fields plus
// subject and free text, which are matched here.
type letterFilter struct {
	Consumer, Subject, Class, Since, Until, Text, State string

	since, until time.Time
	state        dlq.State
}

// parseLetterFilter reads the filter from query or form values. Times are
// RFC 3339, "2006-01-02T15:04" (UTC, what a datetime-local input sends), or
// a duration meaning that long ago ("1h").
func parseLetterFilter(v url.Values, now time.Time) (letterFilter, error) {
	f := letterFilter{
		Consumer: strings.TrimSpace(v.Get("consumer")), Subject: strings.TrimSpace(v.Get("subject")),
		Class: strings.TrimSpace(v.Get("class")), Since: strings.TrimSpace(v.Get("since")),
		Until: strings.TrimSpace(v.Get("until")), Text: strings.TrimSpace(v.Get("q")), State: strings.TrimSpace(v.Get("state")),
	}
	switch f.State {
	case "":
		f.State, f.state = string(dlq.Parked), dlq.Parked
	case "any":
	case string(dlq.Parked), string(dlq.Redriven), string(dlq.Discarded):
		f.state = dlq.State(f.State)
	default:
		return f, badForm("state %q: want parked, redriven, discarded or any", f.State)
	}
	var err error
	if f.since, err = parseWhen(f.Since, now); err != nil {
		return f, badForm("since: %v", err)
	}
	if f.until, err = parseWhen(f.Until, now); err != nil {
		return f, badForm("until: %v", err)
	}
	return f, nil
}

func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time (RFC 3339, 2006-01-02T15:04 in UTC, or a duration ago such as 1h)", s)
}

// Values encodes the filter for links and hidden form fields.
func (f letterFilter) Values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"consumer": f.Consumer, "subject": f.Subject, "class": f.Class, "since": f.Since,
		"until": f.Until, "q": f.Text, "state": f.State} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// Query is the filter as a query string.
func (f letterFilter) Query() string { return f.Values().Encode() }

// Describe is the filter in words, for confirmations and the audit log.
func (f letterFilter) Describe() string {
	var parts []string
	for _, kv := range [][2]string{{"consumer", f.Consumer}, {"subject", f.Subject}, {"class", f.Class}, {"since", f.Since},
		{"until", f.Until}, {"text", f.Text}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+strconv.Quote(kv[1]))
		}
	}
	if len(parts) == 0 {
		return "every parked letter"
	}
	return strings.Join(parts, " ")
}

func (f letterFilter) base() dlq.Filter {
	return dlq.Filter{Consumer: f.Consumer, ErrorClass: f.Class, Since: f.since, Until: f.until, State: f.state}
}

// match applies the filters the store does not: subject (exact) and text
// (case-insensitive, in message id, key, error and payload).
func (f letterFilter) match(l dlq.Letter) bool {
	if f.Subject != "" && l.Source != f.Subject {
		return false
	}
	if f.Text != "" {
		t := strings.ToLower(f.Text)
		if !strings.Contains(strings.ToLower(l.MessageID), t) && !strings.Contains(strings.ToLower(l.Key), t) &&
			!strings.Contains(strings.ToLower(l.Error), t) && !bytes.Contains(bytes.ToLower(l.Payload), []byte(t)) {
			return false
		}
	}
	return true
}

// eachLetter calls fn for every letter matching f with an id ≤ maxID
// (0 = any), oldest first, until fn returns false.
func (c *Console[TTx]) eachLetter(ctx context.Context, f letterFilter, maxID int64, fn func(dlq.Letter) bool) error {
	bf := f.base()
	bf.Limit = 500
	for {
		ls, err := c.dlq.List(ctx, bf)
		if err != nil {
			return err
		}
		for _, l := range ls {
			if maxID > 0 && l.ID > maxID {
				return nil
			}
			if f.match(l) && !fn(l) {
				return nil
			}
		}
		if len(ls) < bf.Limit {
			return nil
		}
		bf.AfterID = ls[len(ls)-1].ID
	}
}

// maxListed bounds the rows of the list page.
const maxListed = 500

func (c *Console[TTx]) dlqList(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	f, err := parseLetterFilter(r.URL.Query(), c.now())
	if err != nil {
		c.renderError(w, r, http.StatusBadRequest, "Bad filter", err.Error())
		return
	}
	var ls []dlq.Letter
	total := 0
	err = c.eachLetter(ctx, f, 0, func(l dlq.Letter) bool {
		total++
		if len(ls) < maxListed {
			ls = append(ls, l)
		}
		return true
	})
	if err != nil {
		c.renderError(w, r, http.StatusInternalServerError, "Dead letters", err.Error())
		return
	}
	consumers, _ := c.dlq.CountParked(ctx)
	c.render(w, r, http.StatusOK, "dlq", "Dead letters", map[string]any{
		"Filter": f, "Letters": ls, "Total": total, "Shown": len(ls), "Consumers": consumers, "Now": c.now(),
		"CanRedrive": c.cfg.Publisher != nil,
	})
}

func (c *Console[TTx]) letterID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, badForm("%q is not a dead-letter id", r.PathValue("id"))
	}
	return id, nil
}

func (c *Console[TTx]) dlqShow(w http.ResponseWriter, r *http.Request) {
	id, err := c.letterID(r)
	if err != nil {
		c.renderError(w, r, http.StatusNotFound, "Not found", err.Error())
		return
	}
	l, err := c.dlq.Get(r.Context(), id)
	if err != nil {
		c.renderError(w, r, statusOf(err), "Dead letter", err.Error())
		return
	}
	// A revision that may be out is published again with its own payload.
	edit, editOK := editable(l.Payload)
	if l.State == dlq.Parked && l.RevisionID != "" {
		edit, editOK = editable(l.RevisionPayload)
	}
	// A letter resolved by a revision names it (the audit log has its id).
	var revisedAs []AuditEntry
	if l.State == dlq.Discarded {
		revisedAs, _ = ListAudit(r.Context(), c.d, AuditFilter{Action: "dlq.revise", Target: fmt.Sprintf("letter %d", l.ID), Outcome: "ok", Limit: 5})
	}
	others, err := c.otherLetters(r.Context(), l)
	if err != nil {
		c.renderError(w, r, statusOf(err), "Dead letter", err.Error())
		return
	}
	// The replay horizon a redrive is checked against: the retention the
	// consumer recorded when it started (the shorter one before a widening,
	// for a letter that may have been recorded under it).
	retention, _ := c.dlq.LetterRetention(r.Context(), l)
	c.render(w, r, http.StatusOK, "letter", fmt.Sprintf("Dead letter %d", l.ID), map[string]any{
		"L": l, "Edit": edit, "Editable": editOK, "Now": c.now(), "CanRedrive": c.cfg.Publisher != nil,
		"Retention": retention, "PastHorizon": retention > 0 && c.now().Sub(l.FirstFailedAt) > retention,
		"RevisionOf": l.Headers[dlq.HeaderRevisionOf], "HeaderRevisionOf": dlq.HeaderRevisionOf, "RevisedAs": revisedAs,
		"Others": others, "HeaderRedriveFor": broker.HeaderRedriveFor,
	})
}

// dlqOne serves POST /dlq/{id}/redrive and /dlq/{id}/discard. The dlq
// store records the action in the audit log (the same entry the idem
// command and the Go API write), so it is not recorded here again. A
// redrive past the letter's replay horizon needs force and a reason.
func (c *Console[TTx]) dlqOne(verb string) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		id, err := c.letterID(r)
		if err != nil {
			return err
		}
		force := r.PostForm.Get("force") != ""
		why, err := reason(r, force)
		if err != nil {
			return badForm("a redrive past the replay horizon needs a reason: why is it safe (the message was never applied)?")
		}
		if verb == "redrive" && c.cfg.Publisher == nil {
			return errNoPublisher
		}
		ctx, who := r.Context(), actor(r.Context())
		if verb == "discard" {
			err = c.dlq.DiscardWith(ctx, id, who, dlq.DiscardOptions{Reason: why})
		} else {
			_, err = c.dlq.RedriveWith(ctx, id, who, c.cfg.Publisher, dlq.RedriveOptions{Force: force, Reason: why})
		}
		if err := c.logLetterAction(ctx, who, "dlq."+verb, id, why, err); err != nil {
			return err
		}
		c.done(w, r, fmt.Sprintf("/dlq/%d", id), url.Values{"done": {map[string]string{"redrive": "redriven", "discard": "discarded"}[verb]}})
		return nil
	}
}

// dlqRevise serves POST /dlq/{id}/revise: the edited payload published
// as a new revision of the letter (dlq.Store.ReviseWith, which records it
// in the audit log). A revision the store's replay check refuses needs
// force and a reason.
func (c *Console[TTx]) dlqRevise(w http.ResponseWriter, r *http.Request) error {
	id, err := c.letterID(r)
	if err != nil {
		return err
	}
	force := r.PostForm.Get("force") != ""
	why, err := reason(r, force)
	if err != nil {
		return badForm("a revision past the replay check needs a reason: why is it safe (the original was never applied)?")
	}
	if c.cfg.Publisher == nil {
		return errNoPublisher
	}
	ctx, who := r.Context(), actor(r.Context())
	l, err := c.dlq.Get(ctx, id)
	if err != nil {
		return err
	}
	payload := formText(r, "payload")
	if json.Valid(l.Payload) && !json.Valid(payload) {
		return badForm("the original payload is JSON and the edited one is not: fix it before redriving")
	}
	// Recorded in the audit log by the dlq store.
	_, rev, err := c.dlq.ReviseWith(ctx, id, who, payload, c.cfg.Publisher, dlq.ReviseOptions{Force: force, Reason: why})
	if errors.Is(err, dlq.ErrDroppedAsDuplicate) { // resolved with the revision published before: no retry helps
		err = fmt.Errorf("%w: %w", errRevisionDropped, err)
	}
	if err := c.logLetterAction(ctx, who, "dlq.revise", id, why, err); err != nil {
		return err
	}
	c.done(w, r, fmt.Sprintf("/dlq/%d", id), url.Values{"done": {"revised"}, "revision": {rev.ID}})
	return nil
}

// logLetterAction logs an action on letter id that the dlq store took (and
// recorded in the audit log), and returns its error.
func (c *Console[TTx]) logLetterAction(ctx context.Context, who, action string, id int64, why string, err error) error {
	if err != nil {
		c.log.WarnContext(ctx, "console action failed", "actor", who, "action", action, "letter", id, "error", err)
		return err
	}
	c.log.InfoContext(ctx, "console action", "actor", who, "action", action, "letter", id, "reason", why)
	return nil
}

// dlqBulkConfirm shows how many letters the bulk action would touch and
// asks to confirm. Letters parked after this page was shown are left out
// (max_id).
func (c *Console[TTx]) dlqBulkConfirm(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	verb := q.Get("action")
	if verb != "redrive" && verb != "discard" {
		c.renderError(w, r, http.StatusBadRequest, "Bad request", "action must be redrive or discard")
		return
	}
	f, err := parseLetterFilter(q, c.now())
	if err != nil {
		c.renderError(w, r, http.StatusBadRequest, "Bad filter", err.Error())
		return
	}
	f.State, f.state = string(dlq.Parked), dlq.Parked
	var n int
	var maxID int64
	if err := c.eachLetter(r.Context(), f, 0, func(l dlq.Letter) bool { n++; maxID = l.ID; return true }); err != nil {
		c.renderError(w, r, http.StatusInternalServerError, "Dead letters", err.Error())
		return
	}
	c.render(w, r, http.StatusOK, "bulk", "Confirm bulk "+verb, map[string]any{
		"Action": verb, "Filter": f, "Count": n, "MaxID": maxID, "CanRedrive": c.cfg.Publisher != nil,
	})
}

func (c *Console[TTx]) dlqBulk(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	verb := r.PostForm.Get("action")
	if verb != "redrive" && verb != "discard" {
		return badForm("action must be redrive or discard")
	}
	if verb == "redrive" && c.cfg.Publisher == nil {
		return errNoPublisher
	}
	f, err := parseLetterFilter(r.PostForm, c.now())
	if err != nil {
		return err
	}
	f.State, f.state = string(dlq.Parked), dlq.Parked
	maxID, err := strconv.ParseInt(r.PostForm.Get("max_id"), 10, 64)
	if err != nil || maxID <= 0 {
		return badForm("max_id is missing: confirm from the count page")
	}
	confirmed, _ := strconv.Atoi(r.PostForm.Get("count"))
	why, _ := reason(r, false)
	n := 0
	err = c.audited(r, "dlq.bulk-"+verb, fmt.Sprintf("%d letter(s) matching %s, id ≤ %d", confirmed, f.Describe(), maxID), why, "",
		func() (string, error) {
			var ids []string
			var actErr error
			skipped, pending := 0, 0
			err := c.eachLetter(ctx, f, maxID, func(l dlq.Letter) bool {
				var err error
				// Each letter's action is in the audit log too (the dlq
				// store's entry), under this bulk entry.
				if verb == "redrive" {
					_, err = c.dlq.RedriveWith(ctx, l.ID, actor(ctx), c.cfg.Publisher, dlq.RedriveOptions{Reason: why})
				} else {
					err = c.dlq.DiscardWith(ctx, l.ID, actor(ctx), dlq.DiscardOptions{Reason: why})
				}
				switch {
				case errors.Is(err, dlq.ErrNotParked): // resolved meanwhile by someone else
					skipped++
					return true
				case errors.Is(err, dlq.ErrRevisionPending): // its revision may be out: never redriven
					pending++
					return true
				case err != nil:
					actErr = fmt.Errorf("after %d letter(s), letter %d: %w", n, l.ID, err)
					return false
				}
				n++
				ids = append(ids, strconv.FormatInt(l.ID, 10))
				return true
			})
			details := fmt.Sprintf("%s %d, skipped %d (no longer parked); ids: %s", verb, n, skipped, strings.Join(ids, ","))
			if pending > 0 {
				details += fmt.Sprintf("; skipped %d with a revision that may be out", pending)
			}
			return details, errors.Join(err, actErr)
		})
	if err != nil {
		return err
	}
	q := f.Values()
	q.Set("done", "bulk")
	q.Set("n", strconv.Itoa(n))
	c.done(w, r, "/dlq", q)
	return nil
}

// otherLetters returns the letters of l's message id parked for other
// consumers (or by l's consumer for another payload), in every state: a
// redrive or revision of l reaches l's consumer only
// (broker.HeaderRedriveFor), so each of them is resolved on its own.
func (c *Console[TTx]) otherLetters(ctx context.Context, l dlq.Letter) ([]dlq.Letter, error) {
	ls, err := c.dlq.OfMessage(ctx, l.MessageID)
	if err != nil {
		return nil, err
	}
	out := ls[:0]
	for _, o := range ls {
		if o.ID != l.ID {
			out = append(out, o)
		}
	}
	return out, nil
}
