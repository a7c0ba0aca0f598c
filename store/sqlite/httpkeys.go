package sqlite

import "github.com/idemkit/idem/store/sqlset"

func httpKeys(t func(string) string) sqlset.HTTPKeys {
	_ = t("idempotency_keys")
	return sqlset.HTTPKeys{}
}
