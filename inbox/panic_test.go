package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// A handler's panic is recovered by Process, ProcessTx and ProcessBatch*:
// it comes back as that message's error (an *idem.PanicError, class
// "panic"), logged with its stack, with the message's writes and inbox
// record rolled back, so its redelivery runs the handler again, while the
// other messages of a batch commit. Before, the panic escaped: the caller's
// process died with the transaction open.
func TestHandlerPanicRecovered(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testHandlerPanicRecovered(t, e.D) })
}

func testHandlerPanicRecovered[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE panic_biz (message_id text NOT NULL)`)
	var logs bytes.Buffer
	ib, err := inbox.New(d, inbox.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := func(ctx context.Context, tx TTx, m idem.Message) error {
		if _, err := d.Tx(tx).Exec(ctx, `INSERT INTO panic_biz (message_id) VALUES ($1)`, m.ID); err != nil {
			return err
		}
		if strings.HasPrefix(m.ID, "poison") {
			panic("poison " + m.ID)
		}
		return nil
	}
	bh := func(ctx context.Context, tx TTx, msgs []idem.Message) error {
		for _, m := range msgs {
			if err := h(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	}
	isPanic := func(what string, err error) {
		t.Helper()
		var pe *idem.PanicError
		if !errors.As(err, &pe) || !errors.Is(err, idem.ErrPanic) || idem.ErrorClass(err) != "panic" || !strings.Contains(err.Error(), "poison") {
			t.Errorf("%s: err %v, want an *idem.PanicError of class panic", what, err)
		}
	}
	m := func(id string) idem.Message { return idem.Message{ID: id, Payload: []byte(id), Attempt: 1} }

	_, err = ib.Process(ctx, "c", m("poison-1"), h)
	isPanic("Process", err)
	err = store.InTx(ctx, d, func(tx TTx) error {
		_, err := ib.ProcessTx(ctx, tx, "c", m("poison-2"), h)
		return err
	})
	isPanic("ProcessTx", err)
	out, err := ib.ProcessBatch(ctx, "c", []idem.Message{m("ok-1"), m("poison-3"), m("ok-2")}, h)
	if err != nil {
		t.Fatalf("ProcessBatch: %v", err)
	}
	isPanic("ProcessBatch's poison outcome", out[1].Err)
	if out[0].Err != nil || out[0].Result != inbox.Processed || out[2].Err != nil || out[2].Result != inbox.Processed {
		t.Errorf("ProcessBatch outcomes %+v: the other messages must be processed", out)
	}
	err = store.InTx(ctx, d, func(tx TTx) error {
		out, err = ib.ProcessBatchWithTx(ctx, tx, "c", []idem.Message{m("ok-3"), m("poison-4")}, bh, h)
		return err
	})
	if err != nil {
		t.Fatalf("ProcessBatchWithTx: %v", err)
	}
	isPanic("ProcessBatchWithTx's poison outcome", out[1].Err)
	if out[0].Err != nil || out[0].Result != inbox.Processed {
		t.Errorf("ProcessBatchWithTx outcomes %+v", out)
	}

	if n := testdb.Count(t, d, `SELECT count(*) FROM panic_biz WHERE message_id LIKE 'poison%'`); n != 0 {
		t.Errorf("%d writes of panicking handlers committed, want 0", n)
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM panic_biz`); n != 3 {
		t.Errorf("%d writes committed, want the 3 ok messages'", n)
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("inbox")+` WHERE message_id LIKE 'poison%'`); n != 0 {
		t.Errorf("%d panicking messages recorded in the inbox, want 0", n)
	}
	// A redelivery runs the handler again: here it no longer panics.
	fixed := func(ctx context.Context, tx TTx, m idem.Message) error { return nil }
	if res, err := ib.Process(ctx, "c", m("poison-1"), fixed); err != nil || res != inbox.Processed {
		t.Errorf("redelivery: %v, %v; want processed", res, err)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "panic_test.go") {
		t.Errorf("no ERROR line with the stack:\n%.2000s", logs.String())
	}
}
