package inbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// A dead-letter redrive or revision addressed to "billing" reaches every
// consumer of the subject. Fed to the inbox for "search", which applied
// the original already, it must not run the handler nor write an inbox
// row: a revision has a new id, so without the check "search" would apply
// the same change twice. For "billing" it is processed as usual. Every
// entry point that takes a consumer and a message is checked.
func TestRedriveForAnotherConsumerIsNotProcessed(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) {
		ctx := context.Background()
		ib, err := inbox.New(d.D, inbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		ran := map[string]int{} // consumer → handler runs
		h := func(consumer string) inbox.Handler[any] {
			return func(context.Context, any, idem.Message) error { ran[consumer]++; return nil }
		}
		rows := func(consumer string) int {
			return testdb.Count(t, d.D, `SELECT count(*) FROM `+d.D.Table("inbox")+` WHERE consumer = $1`, consumer)
		}
		// "search" applied the original; "billing" dead-lettered it and an
		// operator revised it: a new id, addressed to "billing".
		original := idem.Message{ID: "order-1", Payload: []byte(`{"n":1}`), Attempt: 1}
		if res, err := ib.Process(ctx, "search", original, h("search")); err != nil || res != inbox.Processed {
			t.Fatalf("original for search: %v, %v; want processed", res, err)
		}
		revision := func(id string) idem.Message {
			return idem.Message{ID: id, Payload: []byte(`{"n":1,"fixed":true}`), Attempt: 1,
				Headers: map[string]string{broker.HeaderRedriveFor: "billing"}}
		}

		res, err := ib.Process(ctx, "search", revision("rev-1"), h("search"))
		if err != nil || res != inbox.Duplicate {
			t.Fatalf("Process of billing's revision for search: %v, %v; want duplicate", res, err)
		}
		err = store.InTx(ctx, d.D, func(tx any) error {
			res, err = ib.ProcessTx(ctx, tx, "search", revision("rev-2"), h("search"))
			return err
		})
		if err != nil || res != inbox.Duplicate {
			t.Fatalf("ProcessTx of billing's revision for search: %v, %v; want duplicate", res, err)
		}
		outs, err := ib.ProcessBatch(ctx, "search", []idem.Message{revision("rev-3"), {ID: "order-2", Payload: []byte(`{"n":2}`)}}, h("search"))
		if err != nil {
			t.Fatal(err)
		}
		if outs[0] != (inbox.Outcome{Result: inbox.Duplicate}) || outs[1] != (inbox.Outcome{Result: inbox.Processed}) {
			t.Fatalf("ProcessBatch for search: %+v; want the revision duplicate and order-2 processed", outs)
		}
		if _, err := ib.Claim(ctx, "search", revision("rev-4"), 0); !errors.Is(err, idem.ErrDuplicate) {
			t.Fatalf("Claim of billing's revision for search: %v; want idem.ErrDuplicate", err)
		}
		if ran["search"] != 2 || rows("search") != 2 {
			t.Fatalf("search: %d handler runs, %d inbox rows; want 2 and 2 (order-1 and order-2 only)", ran["search"], rows("search"))
		}

		// For "billing", the consumer it is addressed to, it is processed.
		if res, err := ib.Process(ctx, "billing", revision("rev-1"), h("billing")); err != nil || res != inbox.Processed {
			t.Fatalf("Process of its own revision for billing: %v, %v; want processed", res, err)
		}
		if outs, err := ib.ProcessBatch(ctx, "billing", []idem.Message{revision("rev-3")}, h("billing")); err != nil || outs[0] != (inbox.Outcome{Result: inbox.Processed}) {
			t.Fatalf("ProcessBatch of its own revision for billing: %+v, %v; want processed", outs, err)
		}
		l, err := ib.Claim(ctx, "billing", revision("rev-4"), 0)
		if err != nil {
			t.Fatalf("Claim of its own revision for billing: %v", err)
		}
		if err := ib.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
		if ran["billing"] != 2 || rows("billing") != 2 {
			t.Fatalf("billing: %d handler runs, %d inbox rows; want 2 and 2", ran["billing"], rows("billing"))
		}
	})
}
