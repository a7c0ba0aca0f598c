package postgres

import "github.com/idemkit/idem/store/sqlset"

func inbox(t func(string) string) sqlset.Inbox {
	_ = t("inbox")
	return sqlset.Inbox{}
}
