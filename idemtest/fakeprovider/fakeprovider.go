// Package fakeprovider is the client side of the fake third-party provider
// that idemtest.Effect runs a team's external call against: the client
// that EffectCall.Call receives, and the requests and answers of the
// provider's API. It is public so that a module of any path can write that
// call; the provider itself is run by idemtest.
//
// The provider honours the Idempotency-Key header the way Stripe-style
// APIs do and counts the effects it performs, one per key, which is the
// invariant idemtest.Effect checks:
//
//   - POST /emails with any body sends an e-mail (Client.Send);
//   - POST /charges with a [ChargeRequest] charges an amount and answers a
//     [ChargeResult] (Client.Charge);
//   - POST /refunds with a [RefundRequest] refunds the charge made under
//     another key and answers a [RefundResult] (Client.Refund); when no
//     charge was made under that key, the refund cancels it (Status
//     "cancelled") and a late charge is refused.
//
// A new key performs the effect once and answers 200; the same key with
// the same body answers the stored response again (header
// Idempotent-Replayed: true) and performs nothing; the same key with
// another body answers 422. The payment API requires a key (400 without).
//
// A call made with an HTTP client of the team's own (its production client
// pointed at the fake) uses the [Client]'s BaseURL and, to share its
// transport, its HTTPClient, and sends the requests above with the key it
// receives as its Idempotency-Key.
package fakeprovider

import "github.com/idemkit/idem/internal/fakeprovider"

// Client calls the provider with an Idempotency-Key; it is safe for
// concurrent use. Its fields are BaseURL (the provider's base URL,
// "http://127.0.0.1:port"), HTTPClient (the *http.Client that sends the
// requests; nil means http.DefaultClient) and Timeout (bounds one call
// when the context has no earlier deadline; 0 means 10 seconds).
//
// Its methods:
//
//	Send(ctx, key string, body []byte) ([]byte, error)           // POST /emails
//	Charge(ctx, key string, req ChargeRequest) (ChargeResult, error) // POST /charges
//	Refund(ctx, key, chargeKey string) (RefundResult, error)     // POST /refunds
//
// Send returns the provider's answer, the same bytes on a replay. Errors:
// a 4xx answer other than 408, 409 and 429 is a [*StatusError] wrapped with
// idem.Permanent (retrying the same request can never succeed); 5xx, 408,
// 409, 429, transport errors and time-outs are retryable. A time-out does
// not mean the effect did not happen: retry with the same key, and the
// provider answers its stored response without acting again.
//
// idemtest.Effect hands each call a Client of the provider it runs.
type Client = fakeprovider.Client

// StatusError is a non-2xx answer of the provider: its Status and Body.
type StatusError = fakeprovider.StatusError

// ChargeRequest is the body of POST /charges: Amount (> 0, in minor
// units), Currency (required) and an optional Reference.
type ChargeRequest = fakeprovider.ChargeRequest

// ChargeResult is the answer of POST /charges: the charge's ID ("ch_…"),
// the Idempotency-Key it was made under, Amount, Currency and Status
// ("succeeded").
type ChargeResult = fakeprovider.ChargeResult

// RefundRequest is the body of POST /refunds: ChargeKey, the
// Idempotency-Key of the charge to refund.
type RefundRequest = fakeprovider.RefundRequest

// RefundResult is the answer of POST /refunds: the refund's ID ("re_…"),
// its Key, the ChargeKey and ChargeID it refunded, Amount and Status
// ("refunded", or "cancelled" when no charge was made under ChargeKey).
type RefundResult = fakeprovider.RefundResult
