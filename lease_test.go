package idem_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/fpmatch"
)

func TestBackoffCeil(t *testing.T) {
	t.Parallel()
	b := idem.Backoff{Base: 100 * time.Millisecond, Max: 5 * time.Second}
	cases := []struct {
		n    int
		want time.Duration
	}{
		{0, 100 * time.Millisecond}, // before any retry: the base
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{3, 400 * time.Millisecond},
		{4, 800 * time.Millisecond},
		{5, 1600 * time.Millisecond},
		{6, 3200 * time.Millisecond},
		{7, 5 * time.Second}, // 6.4s capped
		{8, 5 * time.Second},
		{1000, 5 * time.Second},
	}
	for _, c := range cases {
		if got := b.Ceil(c.n); got != c.want {
			t.Errorf("Ceil(%d) = %v, want %v", c.n, got, c.want)
		}
	}
	// Doubling until the cap, never above it, never decreasing.
	prev := time.Duration(0)
	for n := 1; n <= 64; n++ {
		c := b.Ceil(n)
		if c < prev || c > b.Max {
			t.Fatalf("Ceil(%d) = %v after %v (max %v)", n, c, prev, b.Max)
		}
		if c < b.Max && n > 1 && c != 2*prev {
			t.Fatalf("Ceil(%d) = %v, want double of %v", n, c, prev)
		}
		prev = c
	}
	// A base above the cap is capped; no cap means no delay.
	if got := (idem.Backoff{Base: time.Minute, Max: time.Second}).Ceil(1); got != time.Second {
		t.Errorf("base above max: Ceil(1) = %v, want 1s", got)
	}
	if got := (idem.Backoff{Base: time.Second}).Ceil(3); got != 0 {
		t.Errorf("zero max: Ceil(3) = %v, want 0", got)
	}
	if got := (idem.Backoff{Max: time.Second}).Ceil(3); got != 0 {
		t.Errorf("zero base: Ceil(3) = %v, want 0", got)
	}
}

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	b := idem.Backoff{Base: 10 * time.Millisecond, Max: time.Second}
	for n := 1; n <= 12; n++ {
		ceil := b.Ceil(n)
		if got := b.Delay(n, func() float64 { return 0 }); got != 0 {
			t.Errorf("Delay(%d, 0) = %v, want 0 (full jitter starts at zero)", n, got)
		}
		top := math.Nextafter(1, 0) // the largest value rand.Float64 returns
		if got := b.Delay(n, func() float64 { return top }); got > ceil || got < ceil-time.Microsecond {
			t.Errorf("Delay(%d, ~1) = %v, want just under %v", n, got, ceil)
		}
		if got := b.Delay(n, func() float64 { return 0.5 }); got != ceil/2 {
			t.Errorf("Delay(%d, 0.5) = %v, want %v", n, got, ceil/2)
		}
		// The default source stays within [0, ceil] and is spread out.
		var lo, hi bool
		for range 2000 {
			d := b.Delay(n, nil)
			if d < 0 || d > ceil {
				t.Fatalf("Delay(%d) = %v outside [0, %v]", n, d, ceil)
			}
			lo = lo || d < ceil/4
			hi = hi || d > 3*ceil/4
		}
		if !lo || !hi {
			t.Errorf("Delay(%d): 2000 draws did not cover [0, %v] (low %v, high %v)", n, ceil, lo, hi)
		}
	}
}

func TestExpiredLease(t *testing.T) {
	t.Parallel()
	var zero idem.ExpiredLease
	if zero != idem.Retake {
		t.Fatalf("the zero ExpiredLease is %v, want Retake (the default)", zero)
	}
	cases := []struct {
		p     idem.ExpiredLease
		s     string
		valid bool
	}{
		{idem.Retake, "retake", true},
		{idem.Hold, "hold", true},
		{idem.ExpiredLease(2), "ExpiredLease(2)", false},
		{idem.ExpiredLease(-1), "ExpiredLease(-1)", false},
	}
	for _, c := range cases {
		if got := c.p.String(); got != c.s {
			t.Errorf("String() = %q, want %q", got, c.s)
		}
		if got := c.p.Valid(); got != c.valid {
			t.Errorf("%v.Valid() = %v, want %v", c.p, got, c.valid)
		}
	}
}

func TestSameFingerprint(t *testing.T) {
	t.Parallel()
	fp := fpmatch.Payload([]byte(`{"a":1,"b":2}`))
	reordered := fpmatch.Payload([]byte(`{ "b": 2, "a": 1 }`))
	other := fpmatch.Payload([]byte(`{"a":1,"b":3}`))
	if fp != reordered {
		t.Fatal("reordered JSON keys must fingerprint the same (canonical JSON)")
	}
	cases := []struct {
		name   string
		stored []byte
		want   bool
	}{
		{"same", fp.Bytes(), true},
		{"same, stored from a reordered payload", reordered.Bytes(), true},
		{"different payload", other.Bytes(), false},
		{"nil", nil, false},
		{"empty", []byte{}, false},
		{"too short", fp.Bytes()[:31], false},
		{"too long", append(fp.Bytes(), 0), false},
		{"hex text instead of bytes", []byte(fp.String()), false},
	}
	for _, c := range cases {
		if got := fpmatch.Same(c.stored, fp); got != c.want {
			t.Errorf("%s: SameFingerprint = %v, want %v", c.name, got, c.want)
		}
		err := fpmatch.Check("orders/42", c.stored, fp)
		if c.want {
			if err != nil {
				t.Errorf("%s: CheckFingerprint = %v, want nil", c.name, err)
			}
			continue
		}
		if !errors.Is(err, idem.ErrFingerprintMismatch) {
			t.Fatalf("%s: CheckFingerprint = %v, want ErrFingerprintMismatch", c.name, err)
		}
		var fm *idem.FingerprintMismatchError
		if !errors.As(err, &fm) {
			t.Fatalf("%s: %T is not a *FingerprintMismatchError", c.name, err)
		}
		if fm.Key != "orders/42" || fm.Received != fp {
			t.Errorf("%s: error carries key %q received %s", c.name, fm.Key, fm.Received)
		}
		if fm.Stored == fm.Received {
			t.Errorf("%s: the error shows two equal fingerprints: %v", c.name, err)
		}
		if !strings.Contains(err.Error(), fp.Short()) || !strings.Contains(err.Error(), "orders/42") {
			t.Errorf("%s: message %q lacks the key or the received fingerprint", c.name, err)
		}
	}
	// A well-formed stored fingerprint is reported as it was stored.
	err := fpmatch.Check("k", other.Bytes(), fp)
	var fm *idem.FingerprintMismatchError
	if !errors.As(err, &fm) || fm.Stored != other {
		t.Fatalf("stored fingerprint in the error = %v, want %s", err, other)
	}
}

// A cap near the largest duration ("no practical cap") must not overflow
// the doubling into a zero or negative ceiling.
func TestBackoffCeilHugeMax(t *testing.T) {
	t.Parallel()
	b := idem.Backoff{Base: time.Hour, Max: math.MaxInt64}
	prev := time.Duration(0)
	for n := 1; n <= 200; n++ {
		c := b.Ceil(n)
		if c < prev || c <= 0 {
			t.Fatalf("Ceil(%d) = %v after Ceil(%d) = %v: the doubling overflowed", n, c, n-1, prev)
		}
		prev = c
	}
}
