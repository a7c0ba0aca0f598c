package fakeprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

// Client calls a provider's POST /emails (and the payment API: Charge,
// Refund) with an Idempotency-Key. Its Send method has the shape of an effect.Performer, so it plugs into the effect
// ledger directly. A Client is safe for concurrent use.
type Client struct {
	// BaseURL is the provider's base URL, e.g. [Provider.URL]. Required.
	BaseURL string
	// HTTPClient sends the requests. Defaults to a client without its own
	// timeout (the per-call Timeout below bounds each call).
	HTTPClient *http.Client
	// Timeout bounds one call when ctx has no earlier deadline. Defaults to
	// 10 seconds.
	Timeout time.Duration
}

// NewClient returns a Client for baseURL with the defaults.
func NewClient(baseURL string) *Client { return &Client{BaseURL: baseURL} }

// StatusError is a non-2xx answer from the provider.
type StatusError struct {
	Status int
	Body   string
}

// Error implements error.
func (e *StatusError) Error() string {
	return fmt.Sprintf("fakeprovider: status %d: %s", e.Status, strings.TrimSpace(e.Body))
}

// Send posts body with Idempotency-Key key and returns the provider's
// response body (the same bytes on a replay).
//
// Errors: a 4xx answer other than 408, 409 and 429 is wrapped with
// [idem.Permanent] (retrying the same request can never succeed); 5xx, 408,
// 409, 429, transport errors and timeouts are retryable. A timeout does not
// mean the effect did not happen: retry with the same key, and the provider
// answers the stored response without performing it again.
func (c *Client) Send(ctx context.Context, key string, body []byte) ([]byte, error) {
	return c.post(ctx, "/emails", key, body)
}

// Charge posts a charge of req with Idempotency-Key key to POST /charges
// and returns the provider's answer; errors are classified as for Send (a
// decline, 402, is permanent; a time-out is retryable with the same key).
func (c *Client) Charge(ctx context.Context, key string, req ChargeRequest) (ChargeResult, error) {
	return postJSON[ChargeResult](ctx, c, "/charges", key, req)
}

// Refund posts a refund of the charge made under chargeKey with
// Idempotency-Key key to POST /refunds. When no charge was made under
// chargeKey the provider cancels that key (Status "cancelled") so a late
// charge is refused; errors are classified as for Send.
func (c *Client) Refund(ctx context.Context, key, chargeKey string) (RefundResult, error) {
	return postJSON[RefundResult](ctx, c, "/refunds", key, RefundRequest{ChargeKey: chargeKey})
}

func postJSON[R any](ctx context.Context, c *Client, path, key string, req any) (R, error) {
	var out R
	body, err := json.Marshal(req)
	if err != nil {
		return out, idem.Permanent(fmt.Errorf("fakeprovider: %w", err))
	}
	res, err := c.post(ctx, path, key, body)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(res, &out); err != nil {
		return out, fmt.Errorf("fakeprovider: decode answer for %q: %w", key, err)
	}
	return out, nil
}

func (c *Client) post(ctx context.Context, path, key string, body []byte) ([]byte, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.BaseURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, idem.Permanent(fmt.Errorf("fakeprovider: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fakeprovider: send %q: %w", key, err)
	}
	defer resp.Body.Close()
	res, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("fakeprovider: read answer for %q: %w", key, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return res, nil
	}
	se := &StatusError{Status: resp.StatusCode, Body: string(res)}
	switch {
	case resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusConflict,
		resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode >= 500:
		return nil, se
	default:
		return nil, idem.Permanent(se)
	}
}
