package effect_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/fakeprovider"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"
)

// Schedule an e-mail in the business transaction; a worker sends it with the
// effect key as the provider's idempotency key. Scheduling it again (a
// redelivered event) is a no-op.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	// The program links the SQLite driver: import _ "modernc.org/sqlite".
	d, _ := sqlstore.OpenSQLite(filepath.Join(dir, "idem.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	defer d.Close()
	if err := migrate.Up(ctx, d); err != nil {
		panic(err)
	}

	provider := fakeprovider.New(fakeprovider.Config{})
	_ = provider.Start()
	defer provider.Close()

	ledger, _ := effect.New(d, effect.Config{})
	for range 2 { // the second schedule is a duplicate
		_ = store.InTx(ctx, d, func(tx *sql.Tx) error {
			// ... the business change in tx ...
			_, created, err := ledger.ScheduleTx(ctx, tx, effect.Effect{
				Key:     "order-confirmed-email:42",
				Kind:    "email",
				Payload: []byte(`{"to":"ana@example.com"}`),
			})
			fmt.Println("created:", created)
			return err
		})
	}

	w, _ := effect.NewWorker(ledger, effect.WorkerConfig[*sql.Tx]{PollInterval: 10 * time.Millisecond})
	_ = w.Register("email", fakeprovider.NewClient(provider.URL()).Send)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(runCtx) }()
	for {
		e, _ := ledger.Get(ctx, "order-confirmed-email:42")
		if e.State == effect.Completed {
			fmt.Println(string(e.Result))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	fmt.Println("unique effects:", provider.UniqueEffects())
	// Output:
	// created: true
	// created: false
	// {"id":"em_1","key":"order-confirmed-email:42","status":"sent"}
	// unique effects: 1
}

// Do guards an inline call: the second call with the same key returns the
// stored result without calling again.
func ExampleLedger_Do() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	// The program links the SQLite driver: import _ "modernc.org/sqlite".
	d, _ := sqlstore.OpenSQLite(filepath.Join(dir, "idem.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	defer d.Close()
	_ = migrate.Up(ctx, d)
	ledger, _ := effect.New(d, effect.Config{})

	calls := 0
	charge := func(ctx context.Context, key string) ([]byte, error) {
		calls++ // a real fn passes key to the provider as its idempotency key
		return []byte(`{"charge":"ch_1"}`), nil
	}
	for range 3 {
		res, err := ledger.Do(ctx, "charge:order-42", charge)
		fmt.Println(string(res), err)
	}
	fmt.Println("calls:", calls)
	// Output:
	// {"charge":"ch_1"} <nil>
	// {"charge":"ch_1"} <nil>
	// {"charge":"ch_1"} <nil>
	// calls: 1
}
