package sqlstore

// SQLiteDSN is sqliteDSN, for the tests of package sqlstore_test.
var SQLiteDSN = sqliteDSN
