package postgres

import "github.com/idemkit/idem/internal/sqlset"

// horizons is the statements on the horizons consumers record (package
// inbox). Recording a longer retention than the one in force keeps the
// shorter one (the narrowest not yet superseded) and when the longer one
// was recorded (migration 0017_retention_widening): letters that first
// failed before widened_at + prior_retention are judged by it.
func horizons(t func(string) string) sqlset.Horizons {
	return sqlset.Horizons{
		Record: `INSERT INTO ` + t("consumer_horizons") + ` AS cur (consumer, inbox_retention, recorded_at) VALUES ($1, $2, $3)
 ON CONFLICT (consumer) DO UPDATE SET
  widened_at = CASE WHEN excluded.inbox_retention > cur.inbox_retention THEN excluded.recorded_at WHEN cur.prior_retention > 0 AND cur.prior_retention >= excluded.inbox_retention THEN 0 ELSE cur.widened_at END,
  prior_retention = CASE WHEN excluded.inbox_retention > cur.inbox_retention THEN (CASE WHEN cur.prior_retention > 0 THEN LEAST(cur.prior_retention, cur.inbox_retention) ELSE cur.inbox_retention END) WHEN cur.prior_retention > 0 AND cur.prior_retention >= excluded.inbox_retention THEN 0 ELSE cur.prior_retention END,
  inbox_retention = excluded.inbox_retention, recorded_at = excluded.recorded_at`,
		Get: `SELECT inbox_retention, recorded_at, prior_retention, widened_at FROM ` + t("consumer_horizons") + ` WHERE consumer = $1`,
	}
}
