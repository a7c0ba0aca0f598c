package fakeprovider

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// The payment API (for the saga drills): POST /charges and POST /refunds,
// both requiring an Idempotency-Key (400 without one).
//
// POST /charges with {"amount":…,"currency":"EUR","reference":"…"} charges
// the amount once per key: 200 {"id":"ch_…","key":…,"amount":…,
// "currency":…,"status":"succeeded"}. The same key and body answers the
// stored response (Idempotent-Replayed: true), another body 422. A key that
// a refund cancelled before the charge arrived answers 422 and charges
// nothing. Declines are injected faults: Fault{On: Charges, Status: 402}.
//
// POST /refunds with {"charge_key":"…"} refunds the charge made under that
// Idempotency-Key, in full, once per refund key: 200 {"id":"re_…",
// "status":"refunded","amount":…}. When no charge was made under
// charge_key the refund cancels the key instead (status "cancelled",
// amount 0): a charge still in flight that arrives later is refused. This
// is how a compensation that overtakes its action stays safe even at the
// provider. A second refund key for an already refunded charge answers 422
// and refunds nothing.

// ChargeRequest is the body of POST /charges.
type ChargeRequest struct {
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Reference string `json:"reference,omitempty"`
}

// ChargeResult is the answer of POST /charges.
type ChargeResult struct {
	ID       string `json:"id"`
	Key      string `json:"key"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

// RefundRequest is the body of POST /refunds.
type RefundRequest struct {
	ChargeKey string `json:"charge_key"`
}

// RefundResult is the answer of POST /refunds.
type RefundResult struct {
	ID        string `json:"id"`
	Key       string `json:"key"`
	ChargeKey string `json:"charge_key"`
	ChargeID  string `json:"charge_id,omitempty"`
	Amount    int64  `json:"amount"`
	Status    string `json:"status"` // "refunded" or "cancelled"
}

// Charge is one unique charge the provider made.
type Charge struct {
	ChargeResult
	Reference string
	Calls     int    // raw calls that carried this key
	RefundKey string // the refund that refunded it, "" if none
	At        time.Time
}

// Refund is one unique refund (or cancellation) the provider made.
type Refund struct {
	RefundResult
	Calls int // raw calls that carried this key
	At    time.Time
}

// payments is the payment API's state, guarded by Provider.mu.
type payments struct {
	calls     []Call
	charges   map[string]*Charge
	chargeFP  map[string][sha256.Size]byte
	refunds   map[string]*Refund
	refundFP  map[string][sha256.Size]byte
	cancelled map[string]string // charge key → refund key that cancelled it
	seq       int
}

func (p *payments) init() {
	if p.charges == nil {
		p.charges = map[string]*Charge{}
		p.chargeFP = map[string][sha256.Size]byte{}
		p.refunds = map[string]*Refund{}
		p.refundFP = map[string][sha256.Size]byte{}
		p.cancelled = map[string]string{}
	}
}

// Charges returns a copy of the charges made, by Idempotency-Key.
func (p *Provider) Charges() map[string]Charge {
	p.mu.Lock()
	defer p.mu.Unlock()
	return copyValues(p.pay.charges)
}

// Refunds returns a copy of the refunds and cancellations made, by
// Idempotency-Key.
func (p *Provider) Refunds() map[string]Refund {
	p.mu.Lock()
	defer p.mu.Unlock()
	return copyValues(p.pay.refunds)
}

// copyValues copies the records of m, by key.
func copyValues[T any](m map[string]*T) map[string]T {
	out := make(map[string]T, len(m))
	for k, v := range m {
		out[k] = *v
	}
	return out
}

// PaymentTotals returns the number of unique charges and refunds (not
// counting cancellations) and the amounts charged and refunded. The saga
// drills check charged − refunded against the confirmed orders.
func (p *Provider) PaymentTotals() (charges, refunds int, charged, refunded int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.pay.charges {
		charges++
		charged += c.Amount
	}
	for _, r := range p.pay.refunds {
		if r.Status == "refunded" {
			refunds++
			refunded += r.Amount
		}
	}
	return charges, refunds, charged, refunded
}

// PaymentCallLog returns a copy of every raw call of the payment API, in
// arrival order (a call shaped by a fault has Fault set; a performed call
// whose answer is held by a Hang fault is already logged with status 200).
func (p *Provider) PaymentCallLog() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return cloneCalls(p.pay.calls)
}

// PaymentCalls returns the number of raw calls received by the payment API.
func (p *Provider) PaymentCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pay.calls)
}

func (p *Provider) serveCharge(w http.ResponseWriter, r *http.Request) {
	p.serve(w, r, Charges, true, p.payment(Charges, p.charge))
}

func (p *Provider) serveRefund(w http.ResponseWriter, r *http.Request) {
	p.serve(w, r, Refunds, true, p.payment(Refunds, p.refund))
}

// performFunc performs or replays the effect of one call and logs call
// (its Status and Replayed filled in).
type performFunc func(key string, body []byte, call Call) (status int, result []byte, replayed bool)

// paymentOp performs or replays one payment operation; it runs under
// Provider.mu with the payment state initialised, fp the body's
// fingerprint.
type paymentOp func(key string, body []byte, fp [sha256.Size]byte, at time.Time) (status int, result []byte, replayed bool)

// payment adapts a payment operation to a performFunc logging to the
// payment call log.
func (p *Provider) payment(on Endpoint, op paymentOp) performFunc {
	return func(key string, body []byte, call Call) (int, []byte, bool) {
		fp := sha256.Sum256(body)
		status, result, replayed := func() (int, []byte, bool) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.pay.init()
			return op(key, body, fp, call.At)
		}()
		call.Status, call.Replayed = status, replayed
		p.record(on, call)
		return status, result, replayed
	}
}

// replay answers a call whose key already performed an effect (counted in
// calls): the stored result when the body is the one that performed it
// (stored and fp are the fingerprints), 422 without effect otherwise.
func replay(calls *int, stored, fp [sha256.Size]byte, result []byte) (int, []byte, bool) {
	*calls++
	if stored != fp {
		return http.StatusUnprocessableEntity, []byte("Idempotency-Key reused with a different body"), false
	}
	return http.StatusOK, result, true
}

func marshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// serve handles one call of endpoint on: read the body, apply the next
// fault of on (Delay; Status without the effect; Hang or Drop after it),
// require a key if requireKey, perform and answer.
func (p *Provider) serve(w http.ResponseWriter, r *http.Request, on Endpoint, requireKey bool, perform performFunc) {
	at := time.Now()
	key := r.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.cfg.MaxBodyBytes))
	if err != nil {
		status := http.StatusBadRequest
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			status = http.StatusRequestEntityTooLarge
		}
		p.record(on, Call{Key: key, Body: body, Status: status, At: at})
		writeProblem(w, status, "cannot read body")
		return
	}
	f, latency := p.nextFault(on)
	if f != nil {
		latency += f.Delay
	}
	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-p.closing:
		}
	}
	if f != nil && f.Status != 0 {
		p.record(on, Call{Key: key, Body: body, Status: f.Status, Fault: true, At: at})
		writeProblem(w, f.Status, "injected failure")
		return
	}
	if key == "" && requireKey {
		p.record(on, Call{Body: body, Status: http.StatusBadRequest, At: at})
		writeProblem(w, http.StatusBadRequest, "Idempotency-Key header is required")
		return
	}
	status, result, replayed := perform(key, body, Call{Key: key, Body: bytes.Clone(body), At: at, Fault: f != nil})
	p.log.Debug("call", "endpoint", string(on), "idempotency_key", key, "status", status, "replayed", replayed)
	if f != nil && status == http.StatusOK {
		switch f.After {
		case Hang:
			select {
			case <-r.Context().Done():
			case <-time.After(f.Hang):
			case <-p.closing:
			}
			panic(http.ErrAbortHandler)
		case Drop:
			panic(http.ErrAbortHandler)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if status != http.StatusOK {
		writeProblem(w, status, string(result))
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(result)
}

func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

func (p *Provider) charge(key string, body []byte, fp [sha256.Size]byte, at time.Time) (int, []byte, bool) {
	var req ChargeRequest
	if err := decodeStrict(body, &req); err != nil || req.Amount <= 0 || req.Currency == "" {
		return http.StatusBadRequest, []byte("body must be {\"amount\":>0,\"currency\":\"…\"}"), false
	}
	if c, ok := p.pay.charges[key]; ok {
		return replay(&c.Calls, p.pay.chargeFP[key], fp, marshal(c.ChargeResult))
	}
	if by, ok := p.pay.cancelled[key]; ok {
		return http.StatusUnprocessableEntity, []byte("charge cancelled by refund " + by + " before it arrived"), false
	}
	p.pay.seq++
	c := &Charge{ChargeResult: ChargeResult{ID: fmt.Sprintf("ch_%d", p.pay.seq), Key: key, Amount: req.Amount,
		Currency: req.Currency, Status: "succeeded"}, Reference: req.Reference, Calls: 1, At: at}
	p.pay.charges[key] = c
	p.pay.chargeFP[key] = fp
	return http.StatusOK, marshal(c.ChargeResult), false
}

func (p *Provider) refund(key string, body []byte, fp [sha256.Size]byte, at time.Time) (int, []byte, bool) {
	var req RefundRequest
	if err := decodeStrict(body, &req); err != nil || req.ChargeKey == "" {
		return http.StatusBadRequest, []byte("body must be {\"charge_key\":\"…\"}"), false
	}
	if r, ok := p.pay.refunds[key]; ok {
		return replay(&r.Calls, p.pay.refundFP[key], fp, marshal(r.RefundResult))
	}
	r := &Refund{RefundResult: RefundResult{Key: key, ChargeKey: req.ChargeKey}, Calls: 1, At: at}
	if c, ok := p.pay.charges[req.ChargeKey]; ok {
		if c.RefundKey != "" {
			return http.StatusUnprocessableEntity, []byte("charge already refunded by " + c.RefundKey), false
		}
		c.RefundKey = key
		r.ChargeID, r.Amount, r.Status = c.ID, c.Amount, "refunded"
	} else if by, ok := p.pay.cancelled[req.ChargeKey]; ok {
		return http.StatusUnprocessableEntity, []byte("charge key already cancelled by " + by), false
	} else {
		p.pay.cancelled[req.ChargeKey] = key
		r.Status = "cancelled"
	}
	p.pay.seq++
	r.ID = fmt.Sprintf("re_%d", p.pay.seq)
	p.pay.refunds[key] = r
	p.pay.refundFP[key] = fp
	return http.StatusOK, marshal(r.RefundResult), false
}
