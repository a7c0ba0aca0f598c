package retention_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/retention"
	"github.com/idemkit/idem/store/sqlstore"
)

// The GC deletes the records whose retention has passed, and only those:
// eight days on, the billing consumer's inbox rows (kept 7 days) go, the
// audit consumer's (kept 30 days) stay. A redelivery after that would be
// processed again, which is why CheckRetention compares a consumer's
// retention with how long its stream keeps messages.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "retention-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	// The program links the SQLite driver: import _ "modernc.org/sqlite".
	d, err := sqlstore.OpenSQLite(filepath.Join(dir, "idem.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	if err := migrate.Up(ctx, d); err != nil {
		panic(err)
	}

	ib, err := inbox.New(d, inbox.Config{
		Retention:    7 * 24 * time.Hour,
		RetentionFor: map[string]time.Duration{"audit": 30 * 24 * time.Hour},
	})
	if err != nil {
		panic(err)
	}
	apply := func(context.Context, *sql.Tx, idem.Message) error { return nil }
	for _, id := range []string{"evt-1", "evt-2"} {
		msg := idem.Message{ID: id, Payload: []byte(`{}`)}
		for _, consumer := range []string{"billing", "audit"} {
			if _, err := ib.Process(ctx, consumer, msg, apply); err != nil {
				panic(err)
			}
		}
	}

	gc, err := retention.New(d, retention.Config{
		Now:    func() time.Time { return time.Now().Add(8 * 24 * time.Hour) },
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	report, err := gc.RunOnce(ctx) // a service runs gc.Run (a pass every Config.Interval)
	if err != nil {
		panic(err)
	}
	fmt.Println("inbox rows deleted:", report.Deleted["inbox"])
	report, _ = gc.RunOnce(ctx)
	fmt.Println("next pass:", report.Total())

	fmt.Println(retention.CheckRetention("billing", 7*24*time.Hour, 14*24*time.Hour) != nil)
	// Output:
	// inbox rows deleted: 2
	// next pass: 0
	// true
}
