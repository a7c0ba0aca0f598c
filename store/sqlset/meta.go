package sqlset

// Meta holds the statements on schema metadata: migrations, horizons and version guards (packages migrate, horizon, versionguard, internal/sqlmeta).
type Meta struct{}
