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
	// The program links the SQLite driver: import _ "modernc.org/sqlite".
	d, _ := sqlstore.OpenSQLite(filepath.Join(dir, "idem.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	defer d.Close()
	_ = migrate.Up(ctx, d)
	_, _ = d.DB().Exec(`CREATE TABLE jobs (delivery_id text PRIMARY KEY, body text)`)

	verifier, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}})
	ib, _ := inbox.New(d, inbox.Config{})
	receiver, _ := webhook.NewReceiver(ib, webhook.ReceiverConfig[*sql.Tx]{
		Source:   "billing",
		Verifier: verifier,
		EnqueueTx: func(ctx context.Context, tx *sql.Tx, del webhook.Delivery, body []byte) error {
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

// Standard Webhooks v1a: the sender signs with its Ed25519 signing key
// (whsk_…), receivers verify with the public key (whpk_…) and hold no
// secret. [webhook.GenerateStandardKeyPair] makes a new pair.
func ExampleNewStandard_ed25519() {
	const (
		signingKey = "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=" // the Standard Webhooks libraries' test key
		publicKey  = "whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g="
	)
	sender, _ := webhook.NewStandard(webhook.StandardConfig{SigningKeys: []string{signingKey}})
	receiver, _ := webhook.NewStandard(webhook.StandardConfig{PublicKeys: []string{publicKey}})

	body := []byte(`{"test": 2432232314}`)
	at := time.Unix(1614265330, 0)
	h := http.Header{}
	_ = sender.Sign(h, webhook.Delivery{ID: "msg_p5jXN8AQM9LWM0D4loKWxJek", Timestamp: at}, body)
	fmt.Println(h.Get("webhook-signature"))

	req := httptest.NewRequest(http.MethodPost, "/webhooks", strings.NewReader(string(body)))
	req.Header = h
	d, err := receiver.Verify(req, body, at)
	fmt.Println(d.ID, err)
	// Output:
	// v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag==
	// msg_p5jXN8AQM9LWM0D4loKWxJek <nil>
}
