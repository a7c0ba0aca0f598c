package boxoffice

import (
	"context"
	"fmt"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"
)

// The boxoffice's business tables live unprefixed in the connection's
// default schema (PostgreSQL search_path, the SQLite main database), next to
// idem's own tables. Every uniqueness the business relies on is a
// constraint here, so a duplicate that slipped past every other guard still
// cannot create a second invoice, e-mail or payment:
//
//   - orders: one row per accepted POST /orders (the HTTP key guards it).
//   - event_inventory: the seats sold per event, the order API's authority
//     for "sold out"; version counts the orders that changed it.
//   - event_availability: the search projection (seats left per event),
//     written only through the version guard.
//   - invoices: UNIQUE (order_id), business key invoice:<orderId>.
//   - outgoing_emails: UNIQUE (order_id, kind).
//   - payments: one row per paid order.
var schemaPostgres = []string{
	`CREATE TABLE IF NOT EXISTS orders (
		order_id       text PRIMARY KEY,
		tenant         text NOT NULL,
		event_id       text NOT NULL,
		customer_email text NOT NULL,
		seats          integer NOT NULL,
		total_cents    bigint NOT NULL,
		currency       text NOT NULL,
		status         text NOT NULL,
		created_at     bigint NOT NULL,
		paid_at        bigint NOT NULL DEFAULT 0
	)`,
	`CREATE INDEX IF NOT EXISTS orders_tenant_idx ON orders (tenant, created_at)`,
	`CREATE TABLE IF NOT EXISTS event_inventory (
		event_id text PRIMARY KEY,
		capacity bigint NOT NULL,
		sold     bigint NOT NULL,
		version  bigint NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS event_availability (
		event_id   text PRIMARY KEY,
		seats_left bigint NOT NULL,
		version    bigint NOT NULL,
		updated_at bigint NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS invoices (
		invoice_key  text PRIMARY KEY,
		order_id     text NOT NULL UNIQUE,
		tenant       text NOT NULL,
		amount_cents bigint NOT NULL,
		currency     text NOT NULL,
		message_id   text NOT NULL,
		created_at   bigint NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS outgoing_emails (
		order_id   text NOT NULL,
		kind       text NOT NULL,
		effect_key text NOT NULL,
		recipient  text NOT NULL,
		created_at bigint NOT NULL,
		UNIQUE (order_id, kind)
	)`,
	`CREATE TABLE IF NOT EXISTS payments (
		order_id   text PRIMARY KEY,
		webhook_id text NOT NULL,
		created_at bigint NOT NULL
	)`,
}

var schemaSQLite = []string{
	`CREATE TABLE IF NOT EXISTS orders (
		order_id       text PRIMARY KEY,
		tenant         text NOT NULL,
		event_id       text NOT NULL,
		customer_email text NOT NULL,
		seats          integer NOT NULL,
		total_cents    integer NOT NULL,
		currency       text NOT NULL,
		status         text NOT NULL,
		created_at     integer NOT NULL,
		paid_at        integer NOT NULL DEFAULT 0
	)`,
	`CREATE INDEX IF NOT EXISTS orders_tenant_idx ON orders (tenant, created_at)`,
	`CREATE TABLE IF NOT EXISTS event_inventory (
		event_id text PRIMARY KEY,
		capacity integer NOT NULL,
		sold     integer NOT NULL,
		version  integer NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS event_availability (
		event_id   text PRIMARY KEY,
		seats_left integer NOT NULL,
		version    integer NOT NULL,
		updated_at integer NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS invoices (
		invoice_key  text PRIMARY KEY,
		order_id     text NOT NULL UNIQUE,
		tenant       text NOT NULL,
		amount_cents integer NOT NULL,
		currency     text NOT NULL,
		message_id   text NOT NULL,
		created_at   integer NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS outgoing_emails (
		order_id   text NOT NULL,
		kind       text NOT NULL,
		effect_key text NOT NULL,
		recipient  text NOT NULL,
		created_at integer NOT NULL,
		UNIQUE (order_id, kind)
	)`,
	`CREATE TABLE IF NOT EXISTS payments (
		order_id   text PRIMARY KEY,
		webhook_id text NOT NULL,
		created_at integer NOT NULL
	)`,
}

// Migrate creates the boxoffice's business tables (CREATE TABLE IF NOT
// EXISTS, so it is safe to run on every start and from several processes at
// once: on PostgreSQL an advisory lock serialises concurrent starts, on
// SQLite the write lock of BEGIN IMMEDIATE does). It does not create idem's
// own tables; see [MigrateAll].
func Migrate(ctx context.Context, d *sqlstore.Driver) error {
	stmts := schemaSQLite
	if d.Dialect() == store.Postgres {
		stmts = schemaPostgres
	}
	return store.InTx(ctx, d, func(tx *sqlTx) error {
		q := d.Tx(tx)
		if d.Dialect() == store.Postgres {
			if _, err := q.Exec(ctx, `SELECT pg_advisory_xact_lock(7244651022)`); err != nil {
				return fmt.Errorf("boxoffice: migrate: %w", err)
			}
		}
		for _, s := range stmts {
			if _, err := q.Exec(ctx, s); err != nil {
				return fmt.Errorf("boxoffice: migrate: %w", err)
			}
		}
		return nil
	})
}
