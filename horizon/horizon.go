// Package horizon declares idem's replay horizons once and computes the
// chain they form and its weakest link.
//
//	sys := horizon.System{
//		Name:           "shop",
//		ClientRetry:    24 * time.Hour,
//		HTTPOperations: []horizon.HTTPOperation{{Name: "POST /orders", KeyRetention: 24 * time.Hour}},
//		Streams:        []horizon.Stream{{Name: "ORDERS", MaxAge: 14 * 24 * time.Hour, DuplicateWindow: 2 * time.Minute}},
//		Consumers:      []horizon.Consumer{{Name: "billing", Stream: "ORDERS", InboxRetention: 7 * 24 * time.Hour}},
//		RedriveWindow:  30 * 24 * time.Hour,
//	}
//	if c, ok := sys.Weakest(); ok && !c.OK {
//		log.Printf("%s outlives %s by %s", c.Replay, c.Guard, horizon.Format(-c.Margin)) // a replay applied as new
//	}
//
// A record that deduplicates (an HTTP key, an inbox row, a provider's
// idempotency key) protects only while it exists. Every party that may
// replay a request or a message does so inside its own horizon: the client
// retries for a while, the relay republishes, the broker redelivers until
// its max age, an operator redrives a dead letter, the effect worker calls
// the provider again. Whenever a replay horizon outlives the record that
// would recognise the replay, a replay is applied as new: a double charge
// after a late redrive.
//
// A [System] lists the horizons of one deployment; [System.Chain] returns
// them in the order a message travels (client retry → HTTP key retention →
// outbox retry → broker dedup window → broker max age → inbox retention →
// redrive window → provider key lifetime) and [System.Checks] pairs every
// replay horizon with the record that must outlive it. [System.Weakest] is
// the check with the smallest margin.
//
// The horizons are enforced where they can be broken, not here: the effect
// worker holds an effect whose provider key is older than its lifetime
// (effect.WithKeyLifetime), the dead-letter store refuses a redrive that may
// be applied as new (dlq.ErrRedriveRefused), a consumer whose inbox
// retention is shorter than its stream's max age does not start
// (consumer.Config.AcceptShortRetention), and the relay warns when its retry
// span outlives the broker's duplicate window. This package only describes;
// `idem horizon` prints it.
package horizon

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Unlimited marks a horizon with no end (a stream without max age, a
// record kept forever). It compares longer than every finite duration.
const Unlimited time.Duration = -1

// Stage is one step of the chain.
type Stage string

// The stages of the chain, in the order a message travels.
const (
	ClientRetry         Stage = "client_retry"          // how long a client retries one request with one key
	HTTPKeyRetention    Stage = "http_key_retention"    // how long an Idempotency-Key record answers for itself
	OutboxRetry         Stage = "outbox_retry"          // how long the relay may republish one event
	BrokerDedupWindow   Stage = "broker_dedup_window"   // the broker's duplicate window (JetStream Duplicates)
	BrokerMaxAge        Stage = "broker_max_age"        // how long the broker keeps (and may redeliver) a message
	InboxRetention      Stage = "inbox_retention"       // how long a consumer remembers a message id
	RedriveWindow       Stage = "redrive_window"        // how long after a failure an operator may redrive a letter
	WebhookSenderRetry  Stage = "webhook_sender_retry"  // how long a webhook sender retries or replays one event
	WebhookRetention    Stage = "webhook_retention"     // how long the receiver remembers a webhook id
	EffectRetry         Stage = "effect_retry"          // how long the effect worker retries one effect
	ProviderKeyLifetime Stage = "provider_key_lifetime" // how long a provider honours an idempotency key
)

var stageOrder = []Stage{ClientRetry, HTTPKeyRetention, OutboxRetry, BrokerDedupWindow, BrokerMaxAge,
	InboxRetention, RedriveWindow, WebhookSenderRetry, WebhookRetention, EffectRetry, ProviderKeyLifetime}

// Link is one declared horizon.
type Link struct {
	Stage Stage `json:"stage"`
	// Component names what it belongs to: an HTTP operation, a stream, a
	// consumer, a webhook source, an effect kind.
	Component string `json:"component"`
	// Duration is the horizon; [Unlimited] for none, 0 for not declared.
	Duration time.Duration `json:"duration_ns"`
	// Source says where the value comes from: "config", "default",
	// "jetstream stream config", "sender documentation", ….
	Source string `json:"source"`
}

// String formats the link's duration: "unlimited", "not declared" or a
// duration in days/hours.
func (l Link) String() string { return Format(l.Duration) }

// Stream is a broker stream or topic.
type Stream struct {
	Name string `json:"name"`
	// MaxAge is how long the broker keeps messages; Unlimited for none.
	MaxAge time.Duration `json:"max_age_ns"`
	// DuplicateWindow is the broker's dedup window on the message id
	// (JetStream Duplicates); 0 when the broker has none.
	DuplicateWindow time.Duration `json:"duplicate_window_ns"`
	// Source says where the values come from.
	Source string `json:"source,omitempty"`
}

// StreamReporter is implemented by subscribers that can read their
// stream's horizons from the broker (the JetStream adapter reads the
// stream config).
type StreamReporter interface {
	StreamHorizon(ctx context.Context) (Stream, error)
}

// Consumer is an idempotent consumer.
type Consumer struct {
	Name   string `json:"name"`
	Stream string `json:"stream"`
	// InboxRetention is how long the consumer remembers a message id.
	InboxRetention time.Duration `json:"inbox_retention_ns"`
}

// WebhookSource is a webhook sender and the receiver's record of it.
type WebhookSource struct {
	Name string `json:"name"`
	// SenderRetry is how long the sender retries (or lets an operator
	// replay) one event; see [WebhookSenderRetry].
	SenderRetry time.Duration `json:"sender_retry_ns"`
	// Retention is how long the receiver remembers a webhook id.
	Retention time.Duration `json:"retention_ns"`
}

// EffectKind is one kind of external effect.
type EffectKind struct {
	Kind string `json:"kind"`
	// RetrySpan is how long the worker may keep retrying one effect (the
	// sum of its backoffs up to MaxAttempts, plus leases).
	RetrySpan time.Duration `json:"retry_span_ns"`
	// KeyLifetime is how long the provider honours an idempotency key
	// (Stripe: 24 h); 0 when not declared.
	KeyLifetime time.Duration `json:"key_lifetime_ns"`
}

// HTTPOperation is an operation guarded by Idempotency-Key.
type HTTPOperation struct {
	Name string `json:"name"`
	// KeyRetention is how long its key records are kept.
	KeyRetention time.Duration `json:"key_retention_ns"`
}

// System is the declared horizons of one deployment.
type System struct {
	Name string `json:"name"`
	// ClientRetry is the longest a client retries one request with one key.
	ClientRetry    time.Duration   `json:"client_retry_ns"`
	HTTPOperations []HTTPOperation `json:"http_operations,omitempty"`
	// OutboxRetry is the relay's retry span (outbox.Relay.RetrySpan).
	OutboxRetry time.Duration `json:"outbox_retry_ns"`
	Streams     []Stream      `json:"streams,omitempty"`
	Consumers   []Consumer    `json:"consumers,omitempty"`
	// RedriveWindow is how long after a failure an operator may still
	// redrive a dead letter (the team's runbook; the dead-letter store keeps
	// parked letters until they are resolved).
	RedriveWindow time.Duration   `json:"redrive_window_ns"`
	Webhooks      []WebhookSource `json:"webhooks,omitempty"`
	Effects       []EffectKind    `json:"effects,omitempty"`
}

// Chain returns every declared horizon in chain order.
func (s System) Chain() []Link {
	var out []Link
	add := func(st Stage, comp string, d time.Duration) {
		out = append(out, Link{Stage: st, Component: comp, Duration: d})
	}
	add(ClientRetry, "clients", s.ClientRetry)
	for _, o := range s.HTTPOperations {
		add(HTTPKeyRetention, o.Name, o.KeyRetention)
	}
	add(OutboxRetry, "relay", s.OutboxRetry)
	for _, st := range s.Streams {
		add(BrokerDedupWindow, st.Name, st.DuplicateWindow)
	}
	for _, st := range s.Streams {
		add(BrokerMaxAge, st.Name, st.MaxAge)
	}
	for _, c := range s.Consumers {
		add(InboxRetention, c.Name, c.InboxRetention)
	}
	add(RedriveWindow, "operators", s.RedriveWindow)
	for _, w := range s.Webhooks {
		add(WebhookSenderRetry, w.Name, w.SenderRetry)
		add(WebhookRetention, w.Name, w.Retention)
	}
	for _, e := range s.Effects {
		add(EffectRetry, e.Kind, e.RetrySpan)
		add(ProviderKeyLifetime, e.Kind, e.KeyLifetime)
	}
	slices.SortStableFunc(out, func(a, b Link) int { return slices.Index(stageOrder, a.Stage) - slices.Index(stageOrder, b.Stage) })
	return out
}

// Severity of a check that fails.
type Severity string

// Severities.
const (
	// Breaks: a replay inside the horizon is applied as new (a second
	// effect) unless an enforcement point stops it.
	Breaks Severity = "breaks"
	// Degrades: a later layer still deduplicates (the inbox behind the
	// broker's window), but this one no longer does.
	Degrades Severity = "degrades"
)

// Check pairs a replay horizon with the record that must outlive it.
type Check struct {
	Replay Link `json:"replay"`
	Guard  Link `json:"guard"`
	// Margin is Guard minus Replay; negative when the replay outlives the
	// guard. Unlimited guards have the largest margin; an unlimited replay
	// against a finite guard the smallest.
	Margin time.Duration `json:"margin_ns"`
	OK     bool          `json:"ok"`
	// Severity is what a failing check means.
	Severity Severity `json:"severity"`
	// Enforced names the enforcement point that stops the replay when the
	// check fails, if any.
	Enforced string `json:"enforced,omitempty"`
	// Undeclared is set when one side is not declared (0): the check
	// cannot be made and counts as failed.
	Undeclared bool `json:"undeclared,omitempty"`
}

// Checks returns the pairs of the chain: every replay horizon against the
// record that must outlive it.
func (s System) Checks() []Check {
	var out []Check
	link := func(st Stage, comp string, d time.Duration) Link {
		return Link{Stage: st, Component: comp, Duration: d}
	}
	client := link(ClientRetry, "clients", s.ClientRetry)
	for _, o := range s.HTTPOperations {
		out = append(out, newCheck(client, link(HTTPKeyRetention, o.Name, o.KeyRetention), Breaks, ""))
	}
	relay := link(OutboxRetry, "relay", s.OutboxRetry)
	redrive := link(RedriveWindow, "operators", s.RedriveWindow)
	streams := map[string]Stream{}
	for _, st := range s.Streams {
		streams[st.Name] = st
		if st.DuplicateWindow != 0 {
			out = append(out, newCheck(relay, link(BrokerDedupWindow, st.Name, st.DuplicateWindow), Degrades, "outbox relay warns at start"))
		}
	}
	for _, c := range s.Consumers {
		guard := link(InboxRetention, c.Name, c.InboxRetention)
		if st, ok := streams[c.Stream]; ok {
			// consumer.Run refuses a finite max age its retention does not
			// cover; a stream read without max age is not refused (acked
			// messages come back only when a durable is reset or created
			// anew under the same consumer name).
			enforced := "consumer refuses to start"
			if st.MaxAge == Unlimited {
				enforced = ""
			}
			out = append(out, newCheck(link(BrokerMaxAge, st.Name, st.MaxAge), guard, Breaks, enforced))
		}
		out = append(out, newCheck(redrive, guard, Breaks, "idem dlq redrive refuses"))
	}
	for _, w := range s.Webhooks {
		out = append(out, newCheck(link(WebhookSenderRetry, w.Name, w.SenderRetry), link(WebhookRetention, w.Name, w.Retention), Breaks, ""))
	}
	for _, e := range s.Effects {
		out = append(out, newCheck(link(EffectRetry, e.Kind, e.RetrySpan), link(ProviderKeyLifetime, e.Kind, e.KeyLifetime), Breaks, "effect worker holds for reconciliation"))
	}
	return out
}

func newCheck(replay, guard Link, sev Severity, enforced string) Check {
	c := Check{Replay: replay, Guard: guard, Severity: sev, Enforced: enforced}
	switch {
	case replay.Duration == 0 || guard.Duration == 0:
		c.Undeclared = true
		c.Margin = 0
	case guard.Duration == Unlimited:
		c.Margin, c.OK = maxDuration, true
	case replay.Duration == Unlimited:
		c.Margin = -maxDuration
	default:
		c.Margin = guard.Duration - replay.Duration
		c.OK = c.Margin >= 0
	}
	return c
}

const maxDuration = time.Duration(1<<63 - 1)

// Weakest returns the declared check with the smallest margin (of equal
// margins: breaking before degrading, unenforced before enforced), and false when no check is
// declared on both sides. Checks with an undeclared side are not ranked:
// see [System.Undeclared].
func (s System) Weakest() (Check, bool) {
	var cs []Check
	for _, c := range s.Checks() {
		if !c.Undeclared {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		return Check{}, false
	}
	return slices.MinFunc(cs, func(a, b Check) int {
		if a.Margin != b.Margin {
			if a.Margin < b.Margin {
				return -1
			}
			return 1
		}
		if a.Severity != b.Severity {
			if a.Severity == Breaks {
				return -1
			}
			return 1
		}
		if (a.Enforced == "") != (b.Enforced == "") {
			if a.Enforced == "" {
				return -1
			}
			return 1
		}
		return 0
	}), true
}

// Undeclared returns the checks that cannot be made because one side is
// not declared.
func (s System) Undeclared() []Check {
	var out []Check
	for _, c := range s.Checks() {
		if c.Undeclared {
			out = append(out, c)
		}
	}
	return out
}

// Format writes d for people: "unlimited", "not declared", or days, hours,
// minutes and seconds ("7d", "1d3h35m5s", "2m").
func Format(d time.Duration) string {
	switch {
	case d == Unlimited:
		return "unlimited"
	case d == 0:
		return "not declared"
	case d < 0:
		return "-" + Format(-d)
	case d < time.Second:
		return d.String()
	}
	var out string
	if days := d / (24 * time.Hour); days > 0 {
		out = fmt.Sprintf("%dd", days)
		d -= days * 24 * time.Hour
	}
	for _, u := range []struct {
		unit time.Duration
		s    string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if n := d / u.unit; n > 0 {
			out += fmt.Sprintf("%d%s", n, u.s)
			d -= n * u.unit
		}
	}
	if out == "" {
		return d.String()
	}
	return out
}

// Covers reports whether guard keeps a record at least as long as replay
// may replay it: Unlimited guards cover everything, a zero (undeclared)
// value covers nothing, an Unlimited replay only an Unlimited guard.
func Covers(guard, replay time.Duration) bool {
	return newCheck(Link{Duration: replay}, Link{Duration: guard}, Breaks, "").OK
}
