// Package schemacheck is the start-up check of the constructors that are
// useless on an unmigrated database (idemhttp.New, outbox.New).
package schemacheck

import (
	"context"
	"errors"
	"time"

	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
)

// timeout bounds the check: a constructor takes no context.
const timeout = 3 * time.Second

// Ready returns migrate.Check's error when the database answers and lacks
// migrations (it says to run `idem migrate up`). A database that cannot be
// asked right now is not an error here: it may come up later, and the
// requests that need it fail, and are logged, meanwhile.
func Ready[TTx any](d store.Driver[TTx]) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := migrate.Check(ctx, d); errors.Is(err, migrate.ErrNotMigrated) {
		return err
	}
	return nil
}
