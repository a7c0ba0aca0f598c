// Package idemmysqltest opens fresh MySQL or MariaDB databases for tests:
// each test gets its own database, dropped when it ends. It reads the
// server's URL from IDEM_TEST_MYSQL_URL and skips the test with a message
// when the variable is unset.
//
//	func TestOrders(t *testing.T) {
//		d := idemmysqltest.Open(t) // a migrated *idemmysql.Driver
//		// ... run the code under test on d
//	}
//
// [Backend] runs idemtest's checks on MySQL:
//
//	idemtest.HTTP(t, idemtest.Service{Backend: idemmysqltest.Backend(t), Handler: …, Invariant: …}, cases...)
package idemmysqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store/idemmysql"
)

// Env names the variable holding the MySQL/MariaDB URL for tests
// (mysql://root@127.0.0.1:3306/test).
const Env = "IDEM_TEST_MYSQL_URL"

// URL returns the test server's URL, or skips t with a message when the
// variable is unset.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(Env)
	if u == "" {
		t.Skipf("%s is not set: skipping the MySQL variant (set it to run against a real MySQL or MariaDB server)", Env)
	}
	return u
}

// Database creates a fresh database on the test server, dropped when t
// ends, and returns its mysql:// URL. It skips t when the variable is unset
// and fails it when the server is unreachable.
func Database(t testing.TB) string {
	t.Helper()
	return databaseAt(t, URL(t))
}

// databaseAt is Database on the server at base.
func databaseAt(t testing.TB, base string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn, err := idemmysql.DSN(base)
	if err != nil {
		t.Fatalf("idemmysqltest: %s: %v", Env, err)
	}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("idemmysqltest: %v", err)
	}
	defer admin.Close()
	name := randomName("idem_test_") // generated here, never input
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4"); err != nil {
		t.Fatalf("idemmysqltest: %s is set but MySQL is unreachable or refused CREATE DATABASE: %v", Env, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Logf("idemmysqltest: drop database %s: %v", name, err)
			return
		}
		defer c.Close()
		if _, err := c.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Logf("idemmysqltest: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("idemmysqltest: %s: %v", Env, err)
	}
	u.Path = "/" + name
	return u.String()
}

// Open returns a migrated driver on a fresh database.
func Open(t testing.TB) *idemmysql.Driver {
	t.Helper()
	d := Bare(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrate.Up(ctx, d); err != nil {
		t.Fatalf("idemmysqltest: migrate: %v", err)
	}
	return d
}

// Bare is Open without the migrations.
func Bare(t testing.TB) *idemmysql.Driver {
	t.Helper()
	d, err := idemmysql.Open(context.Background(), Database(t), idemmysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d.DB().SetMaxOpenConns(32)
	t.Cleanup(func() { d.Close() })
	return d
}

// Backend is an idemtest backend on a fresh MySQL database of the test
// server (skipping t when the variable is unset).
func Backend(t testing.TB) idemtest.Backend {
	t.Helper()
	return BackendAt(URL(t))
}

// BackendAt is an idemtest backend on a fresh database of the MySQL or
// MariaDB server at the mysql:// URL base.
func BackendAt(base string) idemtest.Backend {
	return idemtest.Backend{Open: func(ctx context.Context, t testing.TB) (idemtest.Store, error) {
		d, err := idemmysql.Open(ctx, databaseAt(t, base), idemmysql.Config{})
		if err != nil {
			return nil, err
		}
		d.DB().SetMaxOpenConns(32)
		t.Cleanup(func() { d.Close() })
		return d, nil
	}}
}

// randomName is a fresh identifier: generated here, never input, so it may
// be spliced into CREATE DATABASE.
func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
