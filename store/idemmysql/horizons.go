package idemmysql

import "github.com/idemkit/idem/internal/sqlset"

// horizons is the statements on the horizons consumers record (package
// inbox). Recording a longer retention than the one in force keeps the
// shorter one (the narrowest not yet superseded) and when the longer one
// was recorded (migration 0017_retention_widening): letters that first
// failed before widened_at + prior_retention are judged by it.
// MySQL assigns left to right, each seeing the ones before: widened_at
// first, then prior_retention, both before inbox_retention changes.
func horizons(t func(string) string) sqlset.Horizons {
	return sqlset.Horizons{
		Record: `INSERT INTO ` + t("consumer_horizons") + ` (consumer, inbox_retention, recorded_at) VALUES ($1, $2, $3)
 ON DUPLICATE KEY UPDATE
  widened_at = CASE WHEN VALUES(inbox_retention) > inbox_retention THEN VALUES(recorded_at) WHEN prior_retention > 0 AND prior_retention >= VALUES(inbox_retention) THEN 0 ELSE widened_at END,
  prior_retention = CASE WHEN VALUES(inbox_retention) > inbox_retention THEN (CASE WHEN prior_retention > 0 THEN LEAST(prior_retention, inbox_retention) ELSE inbox_retention END) WHEN prior_retention > 0 AND prior_retention >= VALUES(inbox_retention) THEN 0 ELSE prior_retention END,
  inbox_retention = VALUES(inbox_retention), recorded_at = VALUES(recorded_at)`,
		Get: `SELECT inbox_retention, recorded_at, prior_retention, widened_at FROM ` + t("consumer_horizons") + ` WHERE consumer = $1`,
	}
}
