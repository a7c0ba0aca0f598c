package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/testdb"
)

// The table functions other packages use: every List filter, paging and
// limits, the counts, and the expiry of resolved letters only.
func TestTableFunctions(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		ctx := context.Background()
		d := e.D
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		now := t0
		s, err := dlq.New(d, dlq.Config{Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		park := func(consumer string, msg idem.Message, cause error, at time.Time) int64 {
			t.Helper()
			now = at
			id, err := s.Park(ctx, dlq.FromMessage(consumer, msg, cause))
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		a := park("billing", idem.Message{ID: "a", Subject: "orders", Payload: []byte("1")}, idem.Permanent(errors.New("x")), t0)
		b := park("billing", idem.Message{ID: "b", Subject: "orders", Payload: []byte("2")}, errors.New("boom"), t0.Add(time.Hour))
		c := park("shipping", idem.Message{Subject: "orders", Position: "9", Payload: []byte("3")}, errors.New("boom"), t0.Add(2*time.Hour))
		dd := park("shipping", idem.Message{ID: "d", Subject: "orders", Payload: []byte("4")}, errors.New("boom"), t0.Add(3*time.Hour))

		ids := func(f dlq.Filter) []int64 {
			t.Helper()
			ls, err := s.List(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			out := []int64{}
			for _, l := range ls {
				out = append(out, l.ID)
			}
			return out
		}
		for name, tc := range map[string]struct {
			f    dlq.Filter
			want []int64
		}{
			"all":       {dlq.Filter{}, []int64{a, b, c, dd}},
			"consumer":  {dlq.Filter{Consumer: "shipping"}, []int64{c, dd}},
			"since":     {dlq.Filter{Since: t0.Add(time.Hour)}, []int64{b, c, dd}},
			"until":     {dlq.Filter{Until: t0.Add(2 * time.Hour)}, []int64{a, b}},
			"window":    {dlq.Filter{Since: t0.Add(time.Hour), Until: t0.Add(3 * time.Hour)}, []int64{b, c}},
			"class":     {dlq.Filter{ErrorClass: "permanent"}, []int64{a}},
			"state":     {dlq.Filter{State: dlq.Redriven}, []int64{}},
			"after id":  {dlq.Filter{AfterID: b}, []int64{c, dd}},
			"limit":     {dlq.Filter{Limit: 2}, []int64{a, b}},
			"page":      {dlq.Filter{AfterID: a, Limit: 2}, []int64{b, c}},
			"unlimited": {dlq.Filter{Limit: -1, Consumer: "billing"}, []int64{a, b}},
		} {
			if got := ids(tc.f); !slices.Equal(got, tc.want) {
				t.Errorf("List %s = %v, want %v", name, got, tc.want)
			}
		}

		if ok, err := operator.DLQInstalled(ctx, d); err != nil || !ok {
			t.Fatalf("Installed = %v, %v on a migrated database", ok, err)
		}
		parked, err := operator.DLQCountParked(ctx, d)
		if err != nil || !maps.Equal(parked, map[string]int64{"billing": 2, "shipping": 2}) {
			t.Fatalf("CountParked = %v, %v", parked, err)
		}
		noID, err := operator.DLQCountParkedNoID(ctx, d)
		if err != nil || !maps.Equal(noID, map[string]int64{"shipping": 1}) {
			t.Fatalf("CountParkedNoID = %v, %v", noID, err)
		}

		// Resolve a (redrive) at t0+4h and b (discard) at t0+5h; c, d stay parked.
		now = t0.Add(4 * time.Hour)
		if _, err := s.Redrive(ctx, a, "ops", &recPublisher{}); err != nil {
			t.Fatal(err)
		}
		now = t0.Add(5 * time.Hour)
		if err := s.Discard(ctx, b, "ops"); err != nil {
			t.Fatal(err)
		}
		// CountClass: letters of one error class in any state (a redriven,
		// b discarded, c and d parked are all still counted).
		for class, want := range map[string]int64{"permanent": 1, "transient": 3, "fingerprint_mismatch": 0, "": 0} {
			if n, err := operator.DLQCountClass(ctx, d, class); err != nil || n != want {
				t.Errorf("CountClass(%q) = %d, %v; want %d", class, n, err, want)
			}
		}
		counts, err := operator.DLQCounts(ctx, d)
		if err != nil || !maps.Equal(counts, map[string]int64{"parked": 2, "redriven": 1, "discarded": 1}) {
			t.Fatalf("Counts = %v, %v", counts, err)
		}
		if got := ids(dlq.Filter{State: dlq.Parked}); !slices.Equal(got, []int64{c, dd}) {
			t.Fatalf("List parked = %v", got)
		}

		// Expire: only resolved letters, resolved before the horizon, at most limit per call.
		if n, err := operator.DLQExpire(ctx, d, t0.Add(4*time.Hour), 10); err != nil || n != 0 {
			t.Fatalf("Expire before any resolution = %d, %v", n, err)
		}
		if n, err := operator.DLQExpire(ctx, d, t0.Add(100*time.Hour), 1); err != nil || n != 1 {
			t.Fatalf("Expire limit 1 = %d, %v", n, err)
		}
		if n, err := operator.DLQExpire(ctx, d, t0.Add(100*time.Hour), 10); err != nil || n != 1 {
			t.Fatalf("Expire rest = %d, %v", n, err)
		}
		if got := ids(dlq.Filter{}); !slices.Equal(got, []int64{c, dd}) {
			t.Fatalf("after Expire: %v, want the parked letters kept", got)
		}
	})
}

func TestInstalledOnAnUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		if ok, err := operator.DLQInstalled(context.Background(), e.D); err != nil || ok {
			t.Fatalf("Installed = %v, %v on an empty database, want false", ok, err)
		}
	}, testdb.Unmigrated)
}

// CountClass counts by the class idem.ErrorClass gives the cause, the one
// the console's overview asks for (fingerprint conflicts) included.
func TestCountClass(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		ctx := context.Background()
		s, err := dlq.New(e.D, dlq.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := operator.DLQCountClass(ctx, e.D, idem.ErrorClass(idem.ErrFingerprintMismatch)); err != nil || n != 0 {
			t.Fatalf("CountClass on an empty table = %d, %v", n, err)
		}
		for i, cause := range []error{idem.ErrFingerprintMismatch, fmt.Errorf("wrapped: %w", idem.ErrFingerprintMismatch),
			idem.ErrInvalidInput, errors.New("boom")} {
			msg := idem.Message{ID: fmt.Sprintf("m%d", i), Subject: "orders", Payload: []byte("{}")}
			if _, err := s.Park(ctx, dlq.FromMessage("billing", msg, cause)); err != nil {
				t.Fatal(err)
			}
		}
		for class, want := range map[string]int64{"fingerprint_mismatch": 2, "invalid_input": 1, "transient": 1, "permanent": 0} {
			if n, err := operator.DLQCountClass(ctx, e.D, class); err != nil || n != want {
				t.Errorf("CountClass(%q) = %d, %v; want %d", class, n, err, want)
			}
		}
	})
}
