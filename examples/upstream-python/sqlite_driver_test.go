package upstreampython_test

// The core module links no SQLite driver; these tests run on modernc's.
import _ "modernc.org/sqlite"
