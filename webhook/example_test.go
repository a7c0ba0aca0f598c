package webhook_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store/sqlstore"
	"github.com/idemkit/idem/webhook"
)

// A Standard Webhooks receiver: the first delivery is accepted and its job
// enqueued in the same transaction as the receipt; the sender's replay is
// answered 200 and enqueues nothing.
func ExampleNewReceiver() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	d, _ := sqlstore.OpenSQLite(filepath.Join(dir, "idem.db"), sqlstore.SQLiteOptions{}, sqlstore.Config{})
	defer d.Close()
	_ = migrate.Up(ctx, d)
	_, _ = d.DB().Exec(`CREATE TABLE jobs (delivery_id text PRIMARY KEY, body text)`)

	verifier, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}})
	ib, _ := inbox.New(d, inbox.Config{})
	receiver, _ := webhook.NewReceiver(d, ib, webhook.ReceiverConfig[*sql.Tx]{
		Source:   "billing",
		Verifier: verifier,
		Enqueue: func(ctx context.Context, tx *sql.Tx, del webhook.Delivery, body []byte) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO jobs VALUES ($1, $2)`, del.ID, string(body))
			return err
		},
	})

	body := `{"type":"invoice.paid","invoice":"in_1"}`
	h := http.Header{}
	_ = verifier.Sign(h, webhook.Delivery{ID: "msg_1", Timestamp: time.Now()}, []byte(body)) // what the sender does
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/billing", strings.NewReader(body))
		req.Header = h.Clone()
		rec := httptest.NewRecorder()
		receiver.ServeHTTP(rec, req)
		fmt.Print(rec.Code, " ", rec.Body.String())
	}
	var jobs int
	_ = d.DB().QueryRow(`SELECT count(*) FROM jobs`).Scan(&jobs)
	fmt.Println("jobs:", jobs)
	// Output:
	// 202 {"delivery_id":"msg_1","status":"accepted"}
	// 200 {"delivery_id":"msg_1","status":"duplicate"}
	// jobs: 1
}
