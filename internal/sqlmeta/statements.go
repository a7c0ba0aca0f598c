package sqlmeta

import (
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// statements returns d's catalogue statements.
func statements[TTx any](d store.Driver[TTx]) sqlset.SQLMeta { return d.Statements().SQLMeta }
