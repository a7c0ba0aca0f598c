package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store/sqlstore"
)

// Park a poison message, then redrive it after the fix.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "dlq-example")
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
	letters, _ := dlq.New(d, dlq.Config{})

	msg := idem.Message{ID: "order-42", Subject: "order-events", Payload: []byte(`{"qty":-1}`), Attempt: 1}
	id, _ := letters.Park(ctx, dlq.FromMessage("billing", msg, idem.Permanent(errors.New("negative quantity"))))
	l, _ := letters.Get(ctx, id)
	fmt.Println(l.State, l.ErrorClass, l.MessageID)

	pub := &recPublisher{}
	if _, err := letters.Redrive(ctx, id, "alice", pub); err != nil {
		panic(err)
	}
	_, err = letters.Redrive(ctx, id, "alice", pub)
	fmt.Println(len(pub.msgs), pub.msgs[0].ID, errors.Is(err, dlq.ErrNotParked))
	// Output:
	// parked permanent order-42
	// 1 order-42 true
}
