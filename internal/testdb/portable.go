package testdb

import (
	"regexp"
	"strings"

	"github.com/idemkit/idem/store"
)

// Portable returns a test's own DDL (the business tables a test creates,
// written in PostgreSQL's types, which SQLite accepts too) in dialect's
// types. On MySQL, a CREATE TABLE's text key columns (PRIMARY KEY,
// UNIQUE, REFERENCES, or named in a table-level key) become
// VARCHAR(255) and its other text columns LONGTEXT, both utf8mb4_bin so
// they compare byte for byte as PostgreSQL's text does; bytea becomes
// LONGBLOB, bigserial/serial AUTO_INCREMENT integers, timestamptz
// DATETIME(6) and now() CURRENT_TIMESTAMP(6); ANALYZE t becomes ANALYZE
// TABLE t. An INSERT … ON CONFLICT (…) DO NOTHING becomes store/mysql's
// duplicate-skipping INSERT (/*idem:nodup*/), and ON CONFLICT (…) DO
// UPDATE SET … ON DUPLICATE KEY UPDATE (excluded.c read as VALUES(c)).
// Other statements, and every statement on the other dialects,
// are returned unchanged. The text is a test's constant DDL, never a value.
func Portable(dialect store.Dialect, sql string) string {
	if dialect != store.MySQL {
		return sql
	}
	trimmed := strings.TrimSpace(sql)
	upper := strings.ToUpper(trimmed)
	if strings.HasPrefix(upper, "ANALYZE ") && !strings.HasPrefix(upper, "ANALYZE TABLE") {
		return "ANALYZE TABLE " + strings.TrimSpace(trimmed[len("ANALYZE "):])
	}
	if strings.HasPrefix(upper, "INSERT") {
		return portableInsert(sql)
	}
	if !strings.HasPrefix(upper, "CREATE TABLE") {
		return sql
	}
	keys := map[string]bool{}
	for _, m := range tableKeyRe.FindAllStringSubmatch(sql, -1) {
		for _, c := range strings.Split(m[1], ",") {
			keys[strings.ToLower(strings.Trim(strings.TrimSpace(c), "\"`"))] = true
		}
	}
	sql = textColRe.ReplaceAllStringFunc(sql, func(col string) string {
		m := textColRe.FindStringSubmatch(col)
		name, rest := m[1], m[3]
		typ := "LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
		if keys[strings.ToLower(strings.Trim(name, "\"`"))] || inlineKeyRe.MatchString(rest) {
			typ = "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
		}
		return m[0][:len(m[0])-len(m[2])-len(rest)] + typ + rest
	})
	return typeRe.ReplaceAllStringFunc(sql, func(w string) string {
		switch strings.ToLower(w) {
		case "bytea":
			return "LONGBLOB"
		case "bigserial":
			return "BIGINT AUTO_INCREMENT"
		case "serial":
			return "INT AUTO_INCREMENT"
		case "timestamptz":
			return "DATETIME(6)"
		case "now()":
			return "CURRENT_TIMESTAMP(6)"
		}
		return w
	})
}

var (
	// tableKeyRe finds a table-level PRIMARY KEY (…) or UNIQUE (…).
	tableKeyRe = regexp.MustCompile(`(?i)(?:PRIMARY\s+KEY|UNIQUE)\s*\(([^)]*)\)`)
	// textColRe finds one column defined as text: its name, the type,
	// and the rest of its definition (up to the next comma or paren at
	// depth zero, approximated by the next , or ) not inside quotes).
	textColRe = regexp.MustCompile(`(?i)([A-Za-z_"` + "`" + `][A-Za-z0-9_"` + "`" + `]*)\s+(text)\b([^,)]*)`)
	// inlineKeyRe is a column constraint that makes the column a key.
	inlineKeyRe = regexp.MustCompile(`(?i)\b(PRIMARY\s+KEY|UNIQUE|REFERENCES)\b`)
	typeRe      = regexp.MustCompile(`(?i)\b(bytea|bigserial|serial|timestamptz)\b|\bnow\(\)`)
)

var (
	conflictNothingRe = regexp.MustCompile(`(?is)\s*ON\s+CONFLICT\s*(?:\([^)]*\))?\s*DO\s+NOTHING\s*$`)
	conflictUpdateRe  = regexp.MustCompile(`(?is)\s*ON\s+CONFLICT\s*\([^)]*\)\s*DO\s+UPDATE\s+SET\s+`)
	excludedRe        = regexp.MustCompile(`(?i)\bexcluded\.([A-Za-z_][A-Za-z0-9_]*)`)
)

// portableInsert: ON CONFLICT (target) DO NOTHING first locks an existing
// row of the target's values, when the INSERT names them as plain
// placeholders (so concurrent claimers queue on it instead of deadlocking
// on the shared lock an INSERT leaves on a key it collided with; see
// store/mysql), then inserts skipping a duplicate.
func portableInsert(sql string) string {
	if loc := conflictNothingRe.FindStringIndex(sql); loc != nil {
		ins := sql[:loc[0]]
		if lock := lockExisting(ins, sql[loc[0]:]); lock != "" {
			return "/*idem:collect*/ " + lock + ";\n/*idem:none nodup*/ " + ins
		}
		return "/*idem:nodup*/ " + ins
	}
	if loc := conflictUpdateRe.FindStringIndex(sql); loc != nil {
		return sql[:loc[0]] + " ON DUPLICATE KEY UPDATE " + excludedRe.ReplaceAllString(sql[loc[1]:], "VALUES($1)")
	}
	return sql
}

var (
	insertRe = regexp.MustCompile(`(?is)^\s*INSERT\s+INTO\s+([A-Za-z0-9_."]+)\s*\(([^)]*)\)\s*VALUES\s*\(([^)]*)\)\s*$`)
	targetRe = regexp.MustCompile(`(?is)ON\s+CONFLICT\s*\(([^)]*)\)`)
	phRe     = regexp.MustCompile(`^\$[0-9]+$`)
)

// lockExisting returns SELECT 1 FROM t WHERE target = its values FOR
// UPDATE for a one-row INSERT whose target columns get placeholders, or "".
func lockExisting(ins, conflict string) string {
	m := insertRe.FindStringSubmatch(ins)
	tm := targetRe.FindStringSubmatch(conflict)
	if m == nil || tm == nil {
		return ""
	}
	cols, vals := strings.Split(m[2], ","), strings.Split(m[3], ",")
	if len(cols) != len(vals) {
		return ""
	}
	val := map[string]string{}
	for i, c := range cols {
		val[strings.ToLower(strings.TrimSpace(c))] = strings.TrimSpace(vals[i])
	}
	var where []string
	for _, c := range strings.Split(tm[1], ",") {
		c = strings.ToLower(strings.TrimSpace(c))
		v, ok := val[c]
		if !ok || !phRe.MatchString(v) {
			return ""
		}
		where = append(where, c+" = "+v)
	}
	return "SELECT 1 FROM " + m[1] + " WHERE " + strings.Join(where, " AND ") + " FOR UPDATE"
}
