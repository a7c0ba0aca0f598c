// This file is not part of any package on disk: .ci/sqlite-overlay maps it
// into store/sqlstore for a test run (go test -overlay), so the core
// module's tests run on SQLite while its go.mod requires no SQLite driver.
// In the workspace, modernc.org/sqlite resolves through the modules that
// require it (cmd/idem among them).

package sqlstore

import _ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
