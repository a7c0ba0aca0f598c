package idemmysql

import "github.com/idemkit/idem/internal/sqlset"

// horizons is the statements on the horizons consumers record (package
// inbox).
func horizons(t func(string) string) sqlset.Horizons {
	return sqlset.Horizons{
		Record: `INSERT INTO ` + t("consumer_horizons") + ` (consumer, inbox_retention, recorded_at) VALUES ($1, $2, $3)
 ON DUPLICATE KEY UPDATE inbox_retention = VALUES(inbox_retention), recorded_at = VALUES(recorded_at)`,
		Get: `SELECT inbox_retention, recorded_at FROM ` + t("consumer_horizons") + ` WHERE consumer = $1`,
	}
}
