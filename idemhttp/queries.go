package idemhttp

import (
	"fmt"
	"strings"

	"github.com/idemkit/idem/store"
)

// queries holds every SQL statement of the package, expanded for one driver's
// dialect and table name. Placeholders are $1-style on both dialects.
//
// Every statement that starts or takes over an execution is fenced: the
// insert goes through the primary key (ON CONFLICT DO NOTHING), and every
// later write names the fencing token it read.
type queries struct {
	// insert creates a pending record: $1 tenant, $2 operation, $3 key,
	// $4 fingerprint, $5 created_at, $6 locked_until, $7 expires_at.
	// Returns (token, text) or no row on conflict.
	insert string
	// insertLocked is insert inside the request transaction on PostgreSQL:
	// it first sets lock_timeout to $8 for the wait on the unique index, and
	// restores the previous value in RETURNING once the row is inserted.
	insertLocked string
	// insertStrict is insertLocked without ON CONFLICT, for
	// store.BeginInserter: a conflict is a unique violation (PostgreSQL).
	insertStrict string
	// load reads one record: $1 tenant, $2 operation, $3 key.
	load string
	// takeover re-arms an expired record (retention passed) or, when
	// $10 = 1, a pending record whose lease expired: $4 old token,
	// $5 fingerprint, $6 created_at, $7 locked_until, $8 expires_at, $9 now.
	takeover string
	// takeoverLocked is takeover inside the request transaction on
	// PostgreSQL, after insertLocked: it restores lock_timeout in RETURNING.
	takeoverLocked string
	// hold marks a pending record with an expired lease failed (Hold
	// policy): $4 old token, $5 now.
	hold string
	// complete stores the response: $4 token, $5 status, $6 headers,
	// $7 body, $8 body_omitted, $9 resource_type, $10 resource_id,
	// $11 completed_at. expires_at is left as set by the claim (retention
	// counts from the first request), so the update touches no indexed
	// column and PostgreSQL can make it a cheap HOT update.
	complete string
	// release deletes a pending record the owner gave up (response not
	// stored in two-phase mode): $4 token.
	release string
	// forget deletes a record whatever its state (operator action).
	forget string
}

const cols = `fingerprint, state, token, status, headers, body, body_omitted, resource_type, resource_id, created_at, locked_until, completed_at, expires_at`

const pk = `tenant = $1 AND operation = $2 AND idem_key = $3`

func newQueries(d store.Dialect, table string) queries {
	emptyBlob := `''::bytea`
	if d == store.SQLite {
		emptyBlob = `x''`
	}
	const restore = `, set_config('lock_timeout', current_setting('idem.prev_lock_timeout'), true)`
	r := strings.NewReplacer("{T}", table, "{EMPTY}", emptyBlob, "{PK}", pk, "{COLS}", cols)
	q := queries{
		insert: r.Replace(`INSERT INTO {T} (tenant, operation, idem_key, fingerprint, state, token, created_at, locked_until, expires_at)
VALUES ($1, $2, $3, $4, 'pending', 1, $5, $6, $7)
ON CONFLICT (tenant, operation, idem_key) DO NOTHING
RETURNING token, ''`),
		load: r.Replace(`SELECT {COLS} FROM {T} WHERE {PK}`),
		takeover: r.Replace(`UPDATE {T} SET fingerprint = $5, state = 'pending', token = token + 1, status = 0,
headers = '{}', body = {EMPTY}, body_omitted = 0, resource_type = '', resource_id = '',
created_at = $6, locked_until = $7, completed_at = 0, expires_at = $8
WHERE {PK} AND token = $4 AND (expires_at <= $9 OR (state = 'pending' AND locked_until <= $9 AND $10 = 1))
RETURNING token, ''`),
		hold: r.Replace(`UPDATE {T} SET state = 'failed', token = token + 1, locked_until = 0
WHERE {PK} AND token = $4 AND state = 'pending' AND locked_until <= $5 AND expires_at > $5`),
		complete: r.Replace(`UPDATE {T} SET state = 'completed', status = $5, headers = $6, body = $7, body_omitted = $8,
resource_type = $9, resource_id = $10, locked_until = 0, completed_at = $11
WHERE {PK} AND token = $4 AND state = 'pending'`),
		release: r.Replace(`DELETE FROM {T} WHERE {PK} AND token = $4 AND state = 'pending'`),
		forget:  r.Replace(`DELETE FROM {T} WHERE {PK}`),
	}
	q.insertLocked, q.takeoverLocked = q.insert, q.takeover
	if d == store.Postgres {
		q.takeoverLocked = strings.TrimSuffix(q.takeover, `, ''`) + restore
		// One round trip: remember the transaction's lock_timeout, bound the
		// wait on the unique index by $8, and restore the old value for the
		// handler's own statements once the row is ours.
		q.insertLocked = r.Replace(`WITH lt AS (
  SELECT set_config('idem.prev_lock_timeout', current_setting('lock_timeout'), true) AS prev,
         set_config('lock_timeout', $8, true) AS cur
)
INSERT INTO {T} (tenant, operation, idem_key, fingerprint, state, token, created_at, locked_until, expires_at)
SELECT $1::text, $2::text, $3::text, $4::bytea, 'pending', 1, $5::bigint, $6::bigint, $7::bigint FROM lt
ON CONFLICT (tenant, operation, idem_key) DO NOTHING
RETURNING token`) + restore
		q.insertStrict = strings.Replace(q.insertLocked, "ON CONFLICT (tenant, operation, idem_key) DO NOTHING\n", "", 1)
	}
	return q
}

// pgInterval renders a duration for SET lock_timeout (milliseconds, at
// least 1 so that 0 never means "wait forever").
func pgInterval(ms int64) string {
	if ms < 1 {
		ms = 1
	}
	return fmt.Sprintf("%dms", ms)
}
