package boxoffice

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem/store"
)

// Where the business tables live. On PostgreSQL they are created in the
// schema of idem's own tables (the driver's store.Names.Schema, "idem" by
// default), never in the connection's default schema, and every boxoffice
// query names them schema-qualified ("idem".orders): a database that
// already has an application's own orders, invoices or payments tables in
// public is left alone. idem's library tables stay exactly where its
// migrations put them. On SQLite the business tables are unprefixed in
// the main database (idem's own carry the "idem_" prefix).
//
// Before using a table that already exists, Migrate checks that it has the
// boxoffice's columns; a table of the same name with another shape (a
// SQLite file or a schema shared with another application) stops it with
// [ErrTableClash] naming the table, instead of failing later on a missing
// column.
//
// Every uniqueness the business relies on is a constraint here, so a
// duplicate that slipped past every other guard still cannot create a
// second invoice, e-mail or payment:
//
//   - orders: one row per accepted POST /orders (the HTTP key guards it).
//   - event_inventory: the seats sold per event, the order API's authority
//     for "sold out"; version counts the orders that changed it.
//   - event_availability: the search projection (seats left per event),
//     written only through the version guard.
//   - invoices: UNIQUE (order_id), business key invoice:<orderId>.
//   - outgoing_emails: UNIQUE (order_id, kind).
//   - payments: one row per paid order.
//   - paid_orders: one row per paid-order saga (UNIQUE saga_id);
//     seat_holds: one row per paid order that reserved seats.
type tables struct {
	schema  string // PostgreSQL schema, "" on SQLite and MySQL
	dialect store.Dialect

	orders, inventory, availability, invoices, emails, payments string
	paidOrders, seatHolds                                       string
	// guardAvailability is event_availability as versionguard.Spec.Table
	// takes it (schema.table, unquoted).
	guardAvailability string
}

func tablesFor[TTx any](d store.Driver[TTx]) tables {
	t := tables{dialect: d.Dialect()}
	if d.Dialect() == store.Postgres {
		t.schema = d.Names().Schema
	}
	q := t.qualify
	t.orders, t.inventory, t.availability = q("orders"), q("event_inventory"), q("event_availability")
	t.invoices, t.emails, t.payments = q("invoices"), q("outgoing_emails"), q("payments")
	t.paidOrders, t.seatHolds = q("paid_orders"), q("seat_holds")
	t.guardAvailability = "event_availability"
	if t.schema != "" {
		t.guardAvailability = t.schema + ".event_availability"
	}
	return t
}

// ErrTableClash reports that a table the boxoffice needs already exists
// with other columns (another application's table of the same name). The
// error names the table; nothing was changed.
var ErrTableClash = errors.New("boxoffice: a table with the boxoffice's name exists with other columns")

// businessTable is one business table: its name, its columns (what the
// clash check requires) and its DDL, %[1]s standing for the qualified name,
// %[2]s for the 64-bit integer type (bigint on PostgreSQL and MySQL,
// integer on SQLite), %[3]s for the text type of a key column and %[4]s for
// another text column (text, except on MySQL: VARCHAR in utf8mb4_bin,
// compared byte for byte as PostgreSQL compares text, a key's short enough
// for InnoDB's index limit).
type businessTable struct {
	name    string
	columns []string
	ddl     string
}

var businessTables = []businessTable{
	{"orders", []string{"order_id", "tenant", "event_id", "customer_email", "seats", "total_cents", "currency", "status", "created_at", "paid_at"},
		`CREATE TABLE IF NOT EXISTS %[1]s (
		order_id       %[3]s PRIMARY KEY,
		tenant         %[4]s NOT NULL,
		event_id       %[4]s NOT NULL,
		customer_email %[4]s NOT NULL,
		seats          integer NOT NULL,
		total_cents    %[2]s NOT NULL,
		currency       %[4]s NOT NULL,
		status         %[4]s NOT NULL,
		created_at     %[2]s NOT NULL,
		paid_at        %[2]s NOT NULL DEFAULT 0
	)`},
	{"event_inventory", []string{"event_id", "capacity", "sold", "version"},
		`CREATE TABLE IF NOT EXISTS %[1]s (
		event_id %[3]s PRIMARY KEY,
		capacity %[2]s NOT NULL,
		sold     %[2]s NOT NULL,
		version  %[2]s NOT NULL
	)`},
	{"event_availability", []string{"event_id", "seats_left", "version", "updated_at"},
		`CREATE TABLE IF NOT EXISTS %[1]s (
		event_id   %[3]s PRIMARY KEY,
		seats_left %[2]s NOT NULL,
		version    %[2]s NOT NULL,
		updated_at %[2]s NOT NULL
	)`},
	{"invoices", []string{"invoice_key", "order_id", "tenant", "amount_cents", "currency", "message_id", "created_at"},
		`CREATE TABLE IF NOT EXISTS %[1]s (
		invoice_key  %[3]s PRIMARY KEY,
		order_id     %[3]s NOT NULL UNIQUE,
		tenant       %[4]s NOT NULL,
		amount_cents %[2]s NOT NULL,
		currency     %[4]s NOT NULL,
		message_id   %[4]s NOT NULL,
		created_at   %[2]s NOT NULL
	)`},
	{"outgoing_emails", []string{"order_id", "kind", "effect_key", "recipient", "created_at"},
		`CREATE TABLE IF NOT EXISTS %[1]s (
		order_id   %[3]s NOT NULL,
		kind       %[3]s NOT NULL,
		effect_key %[4]s NOT NULL,
		recipient  %[4]s NOT NULL,
		created_at %[2]s NOT NULL,
		UNIQUE (order_id, kind)
	)`},
	{"payments", []string{"order_id", "webhook_id", "created_at"},
		`CREATE TABLE IF NOT EXISTS %[1]s (
		order_id   %[3]s PRIMARY KEY,
		webhook_id %[4]s NOT NULL,
		created_at %[2]s NOT NULL
	)`},
	// The paid-order saga (paid.go): one row per order, one seat hold per
	// order that reserved seats.
	{"paid_orders", []string{"order_id", "tenant", "saga_id", "event_id", "customer_email", "seats", "total_cents", "currency", "status", "charge_id", "created_at"},
		`CREATE TABLE IF NOT EXISTS %[1]s (
		order_id       %[3]s PRIMARY KEY,
		tenant         %[4]s NOT NULL,
		saga_id        %[3]s NOT NULL UNIQUE,
		event_id       %[4]s NOT NULL,
		customer_email %[4]s NOT NULL,
		seats          integer NOT NULL,
		total_cents    %[2]s NOT NULL,
		currency       %[4]s NOT NULL,
		status         %[4]s NOT NULL,
		charge_id      %[4]s NOT NULL DEFAULT '',
		created_at     %[2]s NOT NULL
	)`},
	{"seat_holds", []string{"order_id", "event_id", "seats", "released", "created_at", "released_at"},
		`CREATE TABLE IF NOT EXISTS %[1]s (
		order_id    %[3]s PRIMARY KEY,
		event_id    %[4]s NOT NULL,
		seats       integer NOT NULL,
		released    integer NOT NULL DEFAULT 0,
		created_at  %[2]s NOT NULL,
		released_at %[2]s NOT NULL DEFAULT 0
	)`},
}

// Migrate creates the boxoffice's business tables (CREATE TABLE IF NOT
// EXISTS, so it is safe to run on every start and from several processes at
// once: on PostgreSQL an advisory lock serialises concurrent starts, on
// SQLite the write lock of BEGIN IMMEDIATE does). On PostgreSQL they go to
// the schema of idem's tables, which must exist: run idem's own
// migrations (migrate.Up) first, as [New] does. A pre-existing table of the same name without
// the boxoffice's columns fails with [ErrTableClash] and changes nothing.
func Migrate[TTx any](ctx context.Context, d store.Driver[TTx]) error {
	t := tablesFor(d)
	return store.InTx(ctx, d, func(tx TTx) error {
		q := d.Tx(tx)
		if t.schema != "" {
			if _, err := q.Exec(ctx, `SELECT pg_advisory_xact_lock(7244651022)`); err != nil {
				return fmt.Errorf("boxoffice: migrate: %w", err)
			}
		}
		int64Type, keyText, text := "integer", "text", "text"
		if t.schema != "" {
			int64Type = "bigint"
		}
		if isMySQL(t.dialect) {
			// No lock: CREATE TABLE IF NOT EXISTS is atomic in MySQL, and
			// DDL commits the transaction anyway.
			int64Type = "bigint"
			keyText = "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
			text = "VARCHAR(700) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin" // the tenant index: 4×700+8 bytes, within 3072
		}
		for _, bt := range businessTables {
			qualified := t.qualify(bt.name)
			if isMySQL(t.dialect) {
				// CREATE TABLE IF NOT EXISTS of an existing table still
				// waits for an exclusive metadata lock on MySQL, behind
				// every open transaction on the table, and every statement
				// after it queues behind that wait: a restarting process
				// would stall the others. An existing table is only
				// checked.
				var n int64
				if err := q.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = $1`,
					bt.name).Scan(&n); err != nil {
					return fmt.Errorf("boxoffice: migrate %s: %w", qualified, err)
				}
				if n > 0 {
					if err := checkColumns(ctx, q, t, bt); err != nil {
						return err
					}
					continue
				}
			}
			if _, err := q.Exec(ctx, fmt.Sprintf(bt.ddl, qualified, int64Type, keyText, text)); err != nil {
				return fmt.Errorf("boxoffice: migrate %s: %w", qualified, err)
			}
			if err := checkColumns(ctx, q, t, bt); err != nil {
				return err
			}
		}
		if isMySQL(t.dialect) {
			// MySQL 8 has no CREATE INDEX IF NOT EXISTS.
			var n int64
			if err := q.QueryRow(ctx, `SELECT count(*) FROM information_schema.statistics
				WHERE table_schema = DATABASE() AND table_name = 'orders' AND index_name = 'orders_tenant_idx'`).Scan(&n); err != nil {
				return fmt.Errorf("boxoffice: migrate: %w", err)
			}
			if n == 0 {
				if _, err := q.Exec(ctx, `CREATE INDEX orders_tenant_idx ON `+t.orders+` (tenant, created_at)`); err != nil && !errors.Is(err, store.ErrUniqueViolation) {
					return fmt.Errorf("boxoffice: migrate: %w", err)
				}
			}
		} else if _, err := q.Exec(ctx, `CREATE INDEX IF NOT EXISTS orders_tenant_idx ON `+t.orders+` (tenant, created_at)`); err != nil {
			return fmt.Errorf("boxoffice: migrate: %w", err)
		}
		return nil
	})
}

func (t tables) qualify(name string) string {
	if t.schema == "" {
		return name
	}
	return `"` + t.schema + `".` + name
}

// checkColumns fails with ErrTableClash when bt's table lacks one of its
// columns (it existed before, with another shape).
func checkColumns(ctx context.Context, q store.Querier, t tables, bt businessTable) error {
	var rows store.Rows
	var err error
	switch {
	case t.schema != "":
		rows, err = q.Query(ctx, `SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2`, t.schema, bt.name)
	case isMySQL(t.dialect):
		rows, err = q.Query(ctx, `SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = $1`, bt.name)
	default:
		rows, err = q.Query(ctx, `SELECT name FROM pragma_table_info($1)`, bt.name)
	}
	if err != nil {
		return fmt.Errorf("boxoffice: migrate: columns of %s: %w", bt.name, err)
	}
	have := map[string]bool{}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			rows.Close()
			return fmt.Errorf("boxoffice: migrate: columns of %s: %w", bt.name, err)
		}
		have[c] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("boxoffice: migrate: columns of %s: %w", bt.name, err)
	}
	var missing []string
	for _, c := range bt.columns {
		if !have[c] {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	where := "in the SQLite database"
	if t.schema != "" {
		where = fmt.Sprintf("in PostgreSQL schema %q", t.schema)
	}
	return fmt.Errorf("%w: table %s %s already exists without the column(s) %s; it belongs to something else: give the boxoffice its own database (or, on PostgreSQL, another idem schema)",
		ErrTableClash, bt.name, where, strings.Join(missing, ", "))
}
