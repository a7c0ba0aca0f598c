package postgres

import "github.com/idemkit/idem/store/sqlset"

func sagas(t func(string) string) sqlset.Sagas {
	_ = t("sagas")
	return sqlset.Sagas{}
}
