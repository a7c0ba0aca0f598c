package idemmysql_test

import (
	"context"
	"testing"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql"
)

// BlockedBehindSeqs answers only for seqs that are parked, as on the other
// dialects: a seq the console listed as parked and an operator retried in
// the meantime (or any seq that is not parked) blocks nothing, and the
// events of its key are not reported as blocked behind it.
func TestBlockedBehindSeqsOnlyParked(t *testing.T) {
	t.Parallel()
	d, o, out := enqueued(t, orders(3, "k")...)
	ctx := context.Background()
	parked := out[0].Seq
	if _, err := d.Pool().Exec(ctx, `UPDATE `+d.Table("outbox")+` SET state = 'failed', last_error = 'boom' WHERE seq = $1`, parked); err != nil {
		t.Fatal(err)
	}
	got, err := o.BlockedBehindSeqs(ctx, []int64{parked, out[1].Seq}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[parked].Count != 2 {
		t.Fatalf("blocked behind the parked event and a pending one: %+v; want 2 behind the parked one only", got)
	}
	if _, err := o.RetryParked(ctx, parked); err != nil {
		t.Fatal(err)
	}
	got, err = o.BlockedBehindSeqs(ctx, []int64{parked}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("blocked behind an event retried (pending again): %+v; want nothing", got)
	}
}

// The driver classifies errors of a caller's own statements on its
// transactions (store.ErrorTranslator), as idem's batches need.
var _ store.ErrorTranslator = (*idemmysql.Driver)(nil)
