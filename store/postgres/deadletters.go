package postgres

import "github.com/idemkit/idem/store/sqlset"

func deadLetters(t func(string) string) sqlset.DeadLetters {
	_ = t("dead_letters")
	return sqlset.DeadLetters{}
}
