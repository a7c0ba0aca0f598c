package idemmysql_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql"
	"github.com/idemkit/idem/store/idemmysql/idemmysqltest"
)

// claimHTTP runs the HTTP key claim (one INSERT … ON DUPLICATE KEY UPDATE)
// on tx and returns the token of a row it inserted, or store.ErrNoRows
// when the key had a row (now locked by tx).
func claimHTTP(ctx context.Context, d *idemmysql.Driver, tx *sql.Tx, key string) (int64, error) {
	var token int64
	var ignored string
	err := d.Tx(tx).QueryRow(ctx, d.Statements().HTTPKeys.Insert,
		"acme", "POST /orders", key, make([]byte, 32), int64(1), int64(0), int64(1<<60)).Scan(&token, &ignored)
	return token, err
}

// The one-statement claim inserts a new key with token 1, and on an
// existing key returns no row and holds the row's lock exclusively: a
// shared read of it from another transaction waits (here, until its
// one-second lock wait timeout).
func TestClaimLocksAnExistingKeyExclusively(t *testing.T) {
	d := idemmysqltest.Open(t)
	ctx := context.Background()
	tx, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := claimHTTP(ctx, d, tx, "k1"); err != nil || tok != 1 {
		t.Fatalf("claim of a new key: token %d, %v; want 1", tok, err)
	}
	if err := d.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	holder, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Rollback(ctx, holder)
	if tok, err := claimHTTP(ctx, d, holder, "k1"); !errors.Is(err, store.ErrNoRows) {
		t.Fatalf("claim of an existing key: token %d, %v; want no row", tok, err)
	}
	reader, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Rollback(ctx, reader)
	if _, err := d.Tx(reader).Exec(ctx, `SET SESSION innodb_lock_wait_timeout = 1`); err != nil {
		t.Fatal(err)
	}
	var state string
	err = d.Tx(reader).QueryRow(ctx, `SELECT state FROM `+d.Table("idempotency_keys")+`
WHERE tenant = $1 AND operation = $2 AND idem_key = $3 LOCK IN SHARE MODE`, "acme", "POST /orders", "k1").Scan(&state)
	if !errors.Is(err, store.ErrLockTimeout) {
		t.Fatalf("a shared read of the claimed row: %v; want a lock wait timeout (the claim holds it exclusively)", err)
	}
}

// Claimers of one existing key that then write it (as a takeover does)
// queue on its exclusive lock: none deadlocks, and every write lands. With
// a plain INSERT meeting the duplicate, each would hold a shared lock and
// their upgrades would deadlock (1213).
func TestConcurrentClaimsOfAnExistingKeyNeverDeadlock(t *testing.T) {
	d := idemmysqltest.Open(t)
	ctx := context.Background()
	if err := store.InTx(ctx, d, func(tx *sql.Tx) error { _, err := claimHTTP(ctx, d, tx, "k1"); return err }); err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for range workers {
		wg.Go(func() {
			for range rounds {
				errs <- store.InTx(ctx, d, func(tx *sql.Tx) error {
					if _, err := claimHTTP(ctx, d, tx, "k1"); !errors.Is(err, store.ErrNoRows) {
						return errors.Join(errors.New("claim of an existing key returned a row"), err)
					}
					_, err := d.Tx(tx).Exec(ctx, `UPDATE `+d.Table("idempotency_keys")+` SET token = token + 1
WHERE tenant = $1 AND operation = $2 AND idem_key = $3`, "acme", "POST /orders", "k1")
					return err
				})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a claimer failed: %v", err)
		}
	}
	var token int64
	if err := d.Pool().QueryRow(ctx, `SELECT token FROM `+d.Table("idempotency_keys")+` WHERE idem_key = $1`, "k1").Scan(&token); err != nil {
		t.Fatal(err)
	}
	if token != 1+workers*rounds {
		t.Fatalf("token %d after %d writes, want %d", token, workers*rounds, 1+workers*rounds)
	}
}
