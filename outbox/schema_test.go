package outbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrate"
)

// TestNewOnAnUnmigratedDatabase: New finds the missing schema at start and
// says what to run, instead of an outbox whose every enqueue fails.
func TestNewOnAnUnmigratedDatabase(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		_, err := New(e.D, Config{})
		if !errors.Is(err, migrate.ErrNotMigrated) || !strings.Contains(err.Error(), "run `idem migrate up`") {
			t.Fatalf("New on an unmigrated database: %v; want migrate.ErrNotMigrated saying to run idem migrate up", err)
		}
		testdb.MustMigrate(t, e.D)
		if _, err := New(e.D, Config{}); err != nil {
			t.Fatalf("New after migrating: %v", err)
		}
	}, testdb.Unmigrated)
}
