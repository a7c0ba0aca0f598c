package storetest_test

import (
	"database/sql"
	"testing"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/storetest"
)

func TestMySQL(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Driver[*sql.Tx] { return testdb.MySQL(t) })
}
