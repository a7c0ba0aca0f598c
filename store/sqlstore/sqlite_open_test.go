//go:build unix

package sqlstore_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store/sqlstore"
)

// TestOpenSQLitePrivateModes checks that a new database's directories are
// created 0700 and its file, -wal and -shm 0600. The umask is set to the
// common 022 for the test (it can only remove bits; with 022 the old
// 0755/0644 modes would show as group- and world-readable).
func TestOpenSQLitePrivateModes(t *testing.T) {
	testdb.SkipWithoutSQLite(t)
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	root := t.TempDir()
	path := filepath.Join(root, "a", "b", "idem.db")
	d, err := sqlstore.OpenSQLite(path, sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// A write makes SQLite create the -wal and -shm files.
	if _, err := d.Pool().Exec(context.Background(), `CREATE TABLE t (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(context.Background(), `INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		want fs.FileMode
	}{
		{filepath.Join(root, "a"), 0o700},
		{filepath.Join(root, "a", "b"), 0o700},
		{path, 0o600},
		{path + "-wal", 0o600},
		{path + "-shm", 0o600},
	} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != c.want {
			t.Errorf("%s: mode %04o, want %04o", c.path, got, c.want)
		}
	}
}

// TestOpenSQLiteMustExist checks that MustExist opens an existing database
// and, for a missing one, fails with fs.ErrNotExist
// without creating the file or its directory.
func TestOpenSQLiteMustExist(t *testing.T) {
	t.Parallel()
	testdb.SkipWithoutSQLite(t)
	root := t.TempDir()
	missing := filepath.Join(root, "typo", "idem.db")
	_, err := sqlstore.OpenSQLite(missing, sqlstore.SQLiteConfig{MustExist: true}, sqlstore.Config{})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing database: %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(filepath.Join(root, "typo")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("MustExist created the directory: %v", err)
	}
	// Same directory, missing file.
	missing = filepath.Join(root, "idem.db")
	if _, err := sqlstore.OpenSQLite(missing, sqlstore.SQLiteConfig{MustExist: true}, sqlstore.Config{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("MustExist created the file: %v", err)
	}
	d, err := sqlstore.OpenSQLite(missing, sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(context.Background(), `CREATE TABLE t (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d, err = sqlstore.OpenSQLite(missing, sqlstore.SQLiteConfig{MustExist: true}, sqlstore.Config{})
	if err != nil {
		t.Fatalf("existing database: %v", err)
	}
	defer d.Close()
	var n int
	if err := d.Pool().QueryRow(context.Background(), `SELECT count(*) FROM t`).Scan(&n); err != nil {
		t.Fatal(err)
	}
}

// TestOpenSQLiteOddPath checks that "%", "?" and "#" in a path name the
// file they spell (they are escaped in the SQLite URI).
func TestOpenSQLiteOddPath(t *testing.T) {
	t.Parallel()
	testdb.SkipWithoutSQLite(t)
	path := filepath.Join(t.TempDir(), "a%20b?c#d.db")
	d, err := sqlstore.OpenSQLite(path, sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Pool().Exec(context.Background(), `CREATE TABLE t (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at %s: %v", path, err)
	}
}
