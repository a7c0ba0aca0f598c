package webhook

import "time"

// Sender retry spans: how long after the first attempt a sender may still
// deliver one event again, automatically or by an operator's replay. The
// receiver's record of a delivery (its inbox retention for consumer
// "webhook:"+Source, inbox.Config.RetentionFor) must outlive it, or a late
// retry is enqueued as new. Values from the senders' documentation:
const (
	// stripeRetrySpan: in live mode Stripe retries a failed delivery with
	// exponential backoff for up to three days (a sandbox retries three
	// times over a few hours).
	stripeRetrySpan = 3 * 24 * time.Hour
	// gitHubRetrySpan: GitHub does not redeliver failed deliveries
	// automatically, but a person or a script may redeliver any delivery
	// from the past 3 days ("Redelivering webhooks"; 7 days on GitHub
	// Enterprise Server), so the horizon is that replay window.
	gitHubRetrySpan = 3 * 24 * time.Hour
	// standardRetrySpan: Svix, the reference sender of Standard
	// Webhooks, attempts immediately, then after 5 s, 5 min, 30 min, 2 h,
	// 5 h, 10 h and 10 h: the last attempt comes 27h35m5s after the first.
	// Svix also lets the sender's operator replay a message by hand later,
	// which no schedule bounds.
	standardRetrySpan = 5*time.Second + 5*time.Minute + 30*time.Minute + 2*time.Hour + 5*time.Hour + 10*time.Hour + 10*time.Hour
)

// SenderRetrySpan returns the documented retry span of a well-known sender
// ("stripe", "github", "standard", "svix") and whether it is known: how
// long after the first attempt the sender may still deliver one event
// again. The receiver's record of a delivery (its inbox retention for
// consumer "webhook:"+Source, inbox.Config.RetentionFor) must outlive it,
// or a late retry is enqueued as new. Stripe: 3 days (live mode; a
// sandbox retries a few hours). GitHub: 3 days, the window in which a
// person or script may redeliver (GitHub does not retry by itself).
// Standard Webhooks (Svix): 27h35m5s, its last scheduled attempt; a
// sender's operator may replay later, which no schedule bounds.
func SenderRetrySpan(sender string) (time.Duration, bool) {
	switch sender {
	case "stripe":
		return stripeRetrySpan, true
	case "github":
		return gitHubRetrySpan, true
	case "standard", "standardwebhooks", "svix":
		return standardRetrySpan, true
	}
	return 0, false
}
