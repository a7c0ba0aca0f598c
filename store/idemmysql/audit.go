package idemmysql

import "github.com/idemkit/idem/internal/sqlset"

// audit is the operator audit log's statements (package console).
func audit(t func(string) string) sqlset.Audit {
	const cols = `id, at, actor, action, target, reason, details, outcome, ended_at`
	return sqlset.Audit{
		List: `SELECT ` + cols + ` FROM ` + t("audit_log") + `
 WHERE (actor = $1 OR $1 = '') AND (action = $2 OR $2 = '') AND ((action >= $3 AND action < $4) OR $3 = '')
 AND (target = $5 OR $5 = '') AND (outcome = $6 OR $6 = '') AND (at >= CAST($7 AS SIGNED) OR $7 = 0)
 AND (id < CAST($8 AS SIGNED) OR $8 = 0)
 ORDER BY id DESC LIMIT $9`,
		// The id is the AUTO_INCREMENT value the insert assigned.
		Start: `/*idem:emit:id*/ INSERT INTO ` + t("audit_log") + ` (at, actor, action, target, reason, details, outcome)
 VALUES ($1, $2, $3, $4, $5, $6, 'started')`,
		End: `UPDATE ` + t("audit_log") + ` SET outcome = $2, ended_at = $3, details = $4 WHERE id = $1`,
	}
}
