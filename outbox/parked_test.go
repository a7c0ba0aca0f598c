package outbox

import (
	"context"
	"slices"
	"testing"

	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// StateOf reads one event's stored state by source and id (the drill's
// projection report asks it), and says when there is no such event.
func TestStateOf(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testStateOf(t, e.D) })
}

func testStateOf[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	o, _ := New(d, Config{Source: "urn:test"})
	out := enqueueTx(t, d, o, ev("a", 0), ev("b", 0), ev("c", 0))
	tbl := d.Table("outbox")
	testdb.Exec(t, d, `UPDATE `+tbl+` SET state = 'completed', published_at = 1 WHERE seq = $1`, out[1].Seq)
	testdb.Exec(t, d, `UPDATE `+tbl+` SET state = 'failed' WHERE seq = $1`, out[2].Seq)
	for i, want := range []string{lease.Pending, lease.Completed, lease.Failed} {
		state, found, err := operator.OutboxStateOf(ctx, d, out[i].Source, out[i].ID)
		if err != nil || !found || state != want {
			t.Fatalf("operator.OutboxStateOf(%s) = %q, %v, %v; want %q", out[i].ID, state, found, err, want)
		}
	}
	for _, k := range [][2]string{{"urn:test", "no-such-event"}, {"urn:other", out[0].ID}} {
		state, found, err := operator.OutboxStateOf(ctx, d, k[0], k[1])
		if err != nil || found || state != "" {
			t.Fatalf("operator.OutboxStateOf(%s, %s) = %q, %v, %v; want not found", k[0], k[1], state, found, err)
		}
	}
}

// BlockedBehindSeqs answers, in one statement, what BlockedBehind answers
// for each parked event of a list: the count of pending events of its key
// after it and the first up to limit of them; keyless, unknown and
// unblocked seqs are absent.
func TestBlockedBehindSeqs(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testBlockedBehindSeqs(t, e.D) })
}

func testBlockedBehindSeqs[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	o, _ := New(d, Config{})
	if got, err := o.BlockedBehindSeqs(ctx, nil, 0); err != nil || len(got) != 0 {
		t.Fatalf("no seqs = %v, %v", got, err)
	}
	out := enqueueTx(t, d, o,
		ev("k1", 0), ev("k1", 1), ev("k1", 2), ev("k1", 3), // 0 parked, 1..3 behind it
		ev("k2", 0), ev("k2", 1), // 4 parked, 5 published: nothing pending behind it
		ev("", 0), ev("", 1), // 6 keyless parked: blocks nothing
		ev("k3", 0), ev("k3", 1), ev("k3", 2), // 8 pending, 9 parked, 10 behind it
	)
	tbl := d.Table("outbox")
	for _, i := range []int{0, 4, 6, 9} {
		testdb.Exec(t, d, `UPDATE `+tbl+` SET state = 'failed', last_error = 'boom' WHERE seq = $1`, out[i].Seq)
	}
	testdb.Exec(t, d, `UPDATE `+tbl+` SET state = 'completed', published_at = 1 WHERE seq = $1`, out[5].Seq)

	parked := []int64{out[0].Seq, out[4].Seq, out[6].Seq, out[9].Seq, out[10].Seq + 1000}
	got, err := o.BlockedBehindSeqs(ctx, parked, 2)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "parked events with something behind", len(got), 2)
	seqs := func(evs []Event) []int64 {
		var s []int64
		for _, e := range evs {
			s = append(s, e.Seq)
		}
		return s
	}
	k1 := got[out[0].Seq]
	mustEqual(t, "k1 count", k1.Count, 3)
	mustEqual(t, "k1 listed", len(k1.Events), 2)
	mustEqual(t, "k1 first", k1.Events[0].Seq, out[1].Seq)
	mustEqual(t, "k1 second", k1.Events[1].Seq, out[2].Seq)
	mustEqual(t, "k1 first payload", string(k1.Events[0].Payload), "k1:1")
	mustEqual(t, "k1 first key", k1.Events[0].Key, "k1")
	k3 := got[out[9].Seq]
	mustEqual(t, "k3 count", k3.Count, 1)
	mustEqual(t, "k3 listed", len(k3.Events), 1)
	mustEqual(t, "k3 blocked", k3.Events[0].Seq, out[10].Seq)

	// The same answers as BlockedBehind, one parked event at a time.
	for _, p := range parked[:4] {
		i := map[int64]int{out[0].Seq: 0, out[4].Seq: 4, out[6].Seq: 6, out[9].Seq: 9}[p]
		n, evs, err := o.BlockedBehind(ctx, out[i].Key, p, 2)
		if err != nil {
			t.Fatal(err)
		}
		b := got[p]
		mustEqual(t, "count like BlockedBehind", b.Count, n)
		if s1, s2 := seqs(b.Events), seqs(evs); !slices.Equal(s1, s2) {
			t.Fatalf("seq %d: BlockedBehindSeqs listed %v, BlockedBehind %v", p, s1, s2)
		}
	}

	// The default limit is 10.
	all, err := o.BlockedBehindSeqs(ctx, parked[:1], 0)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "default limit lists all three", len(all[out[0].Seq].Events), 3)
}
