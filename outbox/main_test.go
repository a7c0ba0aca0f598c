package outbox_test

import (
	"testing"

	"github.com/idemkit/idem/internal/testdb"
)

// The Examples run on SQLite; testdb.Main skips them, saying so, when no
// SQLite driver is linked (the core module depends on none).
func TestMain(m *testing.M) { testdb.Main(m) }
