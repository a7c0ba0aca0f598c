package postgres

import (
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlset"
)

func outboxSQL(t func(string) string, n store.Names) sqlset.Outbox {
	_, _ = t("outbox"), n
	return sqlset.Outbox{}
}
