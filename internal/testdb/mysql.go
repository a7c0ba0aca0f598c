package testdb

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem/store/mysql"
)

// EnvMySQL names the variable holding the MySQL/MariaDB URL for tests
// (mysql://root@127.0.0.1:3306/test).
const EnvMySQL = "IDEM_TEST_MYSQL_URL"

// MySQLURL returns the test server's URL, or skips t with a message when
// the variable is unset.
func MySQLURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvMySQL)
	if u == "" {
		t.Skipf("%s is not set: skipping the MySQL variant (set it to run against a real MySQL or MariaDB server)", EnvMySQL)
	}
	return u
}

// MySQLDatabase creates a fresh database on the test server, dropped when
// t ends, and returns its mysql:// URL. It skips t when the variable is
// unset and fails it when the server is unreachable.
func MySQLDatabase(t testing.TB) string {
	t.Helper()
	base := MySQLURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn, err := mysql.DSN(base)
	if err != nil {
		t.Fatalf("testdb: %s: %v", EnvMySQL, err)
	}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	defer admin.Close()
	name := randomName("idem_test_") // generated here, never input
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4"); err != nil {
		t.Fatalf("testdb: %s is set but MySQL is unreachable or refused CREATE DATABASE: %v", EnvMySQL, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Logf("testdb: drop database %s: %v", name, err)
			return
		}
		defer c.Close()
		if _, err := c.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Logf("testdb: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testdb: %s: %v", EnvMySQL, err)
	}
	u.Path = "/" + name
	return u.String()
}

// MySQL returns a migrated MySQL driver on a fresh database.
func MySQL(t testing.TB) *mysql.Driver {
	t.Helper()
	d := MySQLBare(t)
	MustMigrate(t, d)
	return d
}

// MySQLBare is MySQL without the migrations.
func MySQLBare(t testing.TB) *mysql.Driver {
	t.Helper()
	d, err := mysql.Open(context.Background(), MySQLDatabase(t), mysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d.DB().SetMaxOpenConns(32)
	t.Cleanup(func() { d.Close() })
	return d
}
