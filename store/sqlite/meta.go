package sqlite

import (
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlset"
)

func meta(t func(string) string, n store.Names) sqlset.Meta {
	_, _ = t("schema_migrations"), n
	return sqlset.Meta{}
}
