package saga_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/fakeprovider"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/saga"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
	"github.com/idemkit/idem/store/sqlstore"
)

// Define a checkout saga (reserve seats locally, charge the card at a
// provider, each with its compensation) and start it inside the business
// transaction on SQLite; a worker runs it. Starting it again is a no-op.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-saga-example")
	defer os.RemoveAll(dir)
	// The program links the SQLite driver: import _ "modernc.org/sqlite".
	d, _ := sqlstore.OpenSQLite(filepath.Join(dir, "shop.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	defer d.Close()
	if err := migrate.Up(ctx, d); err != nil {
		panic(err)
	}
	_, _ = d.DB().ExecContext(ctx, `CREATE TABLE holds (order_id text PRIMARY KEY, released integer NOT NULL DEFAULT 0)`)

	provider := fakeprovider.New(fakeprovider.Config{})
	_ = provider.Start()
	defer provider.Close()
	pay := fakeprovider.NewClient(provider.URL())

	checkout := saga.Definition[*sql.Tx]{Name: "checkout", Steps: []saga.Step[*sql.Tx]{
		{
			Name: "reserve", // local: runs in the barrier's transaction, exactly once
			DoTx: func(ctx context.Context, tx *sql.Tx, c saga.Call) ([]byte, error) {
				_, err := tx.ExecContext(ctx, `INSERT INTO holds (order_id) VALUES ($1)`, c.SagaID)
				return nil, err
			},
			UndoTx: func(ctx context.Context, tx *sql.Tx, c saga.Call) ([]byte, error) {
				_, err := tx.ExecContext(ctx, `UPDATE holds SET released = 1 WHERE order_id = $1`, c.SagaID)
				return nil, err
			},
		},
		{
			Name: "charge", // external: c.Key is the provider's idempotency key
			Do: func(ctx context.Context, c saga.Call) ([]byte, error) {
				r, err := pay.Charge(ctx, c.Key, fakeprovider.ChargeRequest{Amount: 900, Currency: "EUR", Reference: c.SagaID})
				if err != nil {
					return nil, err
				}
				return json.Marshal(r)
			},
			Undo: func(ctx context.Context, c saga.Call) ([]byte, error) {
				r, err := pay.Refund(ctx, c.Key, c.DoKey) // refund what the action's key charged
				if err != nil {
					return nil, err
				}
				return json.Marshal(r)
			},
		},
	}}
	ledger, _ := effect.New(d, effect.Config{})
	sagas, _ := saga.New(d, ledger, saga.Config{}, checkout)

	for range 2 { // the second start is a duplicate request
		_ = store.InTx(ctx, d, func(tx *sql.Tx) error {
			// ... the business change (the order row) in tx ...
			_, started, err := sagas.StartTx(ctx, tx, "checkout", "order-42", []byte(`{"amount":900}`))
			fmt.Println("started:", started)
			return err
		})
	}

	w, _ := saga.NewWorker(sagas, saga.WorkerConfig[*sql.Tx]{Effect: effect.WorkerConfig[*sql.Tx]{PollInterval: 10 * time.Millisecond}})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(runCtx) }()
	for {
		if sg, _ := sagas.Get(ctx, "order-42"); sg.State == saga.Completed {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	charges, _, charged, _ := provider.PaymentTotals()
	fmt.Println("completed; charges:", charges, "charged:", charged)
	// Output:
	// started: true
	// started: false
	// completed; charges: 1 charged: 900
}

// The same on PostgreSQL through pgx: the transaction type is pgx.Tx. The
// database URL comes from IDEM_TEST_POSTGRES_URL (this example runs in
// TestExamplePgx when it is set; "go test" cannot run it without a server).
func Example_pgx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("IDEM_TEST_POSTGRES_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	schema := "saga_example_" + hex.EncodeToString(b)
	defer pool.Exec(context.WithoutCancel(ctx), `DROP SCHEMA `+schema+` CASCADE`)
	d, _ := pgxstore.New(pool, pgxstore.Config{Names: store.Names{Schema: schema}})
	if err := migrate.Up(ctx, d); err != nil {
		panic(err)
	}

	provider := fakeprovider.New(fakeprovider.Config{})
	_ = provider.Start()
	defer provider.Close()
	pay := fakeprovider.NewClient(provider.URL())

	deposit := saga.Definition[pgx.Tx]{Name: "deposit", Steps: []saga.Step[pgx.Tx]{{
		Name: "charge",
		Do: func(ctx context.Context, c saga.Call) ([]byte, error) {
			r, err := pay.Charge(ctx, c.Key, fakeprovider.ChargeRequest{Amount: 5000, Currency: "EUR", Reference: c.SagaID})
			if err != nil {
				return nil, err
			}
			return json.Marshal(r)
		},
		Undo: func(ctx context.Context, c saga.Call) ([]byte, error) {
			r, err := pay.Refund(ctx, c.Key, c.DoKey)
			if err != nil {
				return nil, err
			}
			return json.Marshal(r)
		},
	}}}
	ledger, _ := effect.New(d, effect.Config{})
	sagas, _ := saga.New(d, ledger, saga.Config{}, deposit)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// ... the booking row in tx ...
		_, started, err := sagas.StartTx(ctx, tx, "deposit", "booking-7", []byte(`{"amount":5000}`))
		fmt.Println("started:", started)
		return err
	})
	if err != nil {
		panic(err)
	}
	w, _ := saga.NewWorker(sagas, saga.WorkerConfig[pgx.Tx]{Effect: effect.WorkerConfig[pgx.Tx]{PollInterval: 10 * time.Millisecond}})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(runCtx) }()
	for {
		if sg, _ := sagas.Get(ctx, "booking-7"); sg.State == saga.Completed {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	recs, _ := sagas.Steps(ctx, "booking-7")
	fmt.Println(recs[0].Name, recs[0].Op, recs[0].Outcome)
	// Prints:
	// started: true
	// charge do applied
}
