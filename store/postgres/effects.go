package postgres

import "github.com/idemkit/idem/store/sqlset"

func effects(t func(string) string) sqlset.Effects {
	_ = t("effects")
	return sqlset.Effects{}
}
