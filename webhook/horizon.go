package webhook

import "time"

// Sender retry spans: how long after the first attempt a sender may still
// deliver one event again, automatically or by an operator's replay. The
// receiver's record of a delivery (its inbox retention for consumer
// "webhook:"+Source, inbox.Config.RetentionFor) must outlive it, or a late
// retry is enqueued as new. Values from the senders' documentation:
const (
	// StripeRetrySpan: in live mode Stripe retries a failed delivery with
	// exponential backoff for up to three days (a sandbox retries three
	// times over a few hours).
	StripeRetrySpan = 3 * 24 * time.Hour
	// GitHubRetrySpan: GitHub does not redeliver failed deliveries
	// automatically, but a person or a script may redeliver any delivery
	// from the past 3 days ("Redelivering webhooks"; 7 days on GitHub
	// Enterprise Server), so the horizon is that replay window.
	GitHubRetrySpan = 3 * 24 * time.Hour
	// StandardWebhooksRetrySpan: Svix, the reference sender of Standard
	// Webhooks, attempts immediately, then after 5 s, 5 min, 30 min, 2 h,
	// 5 h, 10 h and 10 h: the last attempt comes 27h35m5s after the first.
	// Svix also lets the sender's operator replay a message by hand later,
	// which no schedule bounds.
	StandardWebhooksRetrySpan = 5*time.Second + 5*time.Minute + 30*time.Minute + 2*time.Hour + 5*time.Hour + 10*time.Hour + 10*time.Hour
)

// SenderRetrySpan returns the documented retry span of a well-known sender
// ("stripe", "github", "standard", "svix") and whether it is known.
func SenderRetrySpan(sender string) (time.Duration, bool) {
	switch sender {
	case "stripe":
		return StripeRetrySpan, true
	case "github":
		return GitHubRetrySpan, true
	case "standard", "standardwebhooks", "svix":
		return StandardWebhooksRetrySpan, true
	}
	return 0, false
}
