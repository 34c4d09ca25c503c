// Package pgtest gives tests the real Postgres they run against: the
// test database's URL and a fresh schema per test, dropped when the test
// ends, so tests running at once never share tables.
//
//	schema := pgtest.Schema(t, "chatstoretest") // skips, or fails with CI=true, when Postgres is unreachable
//	st, err := postgres.Open(ctx, postgres.Config{URL: pgtest.URL(), Schema: schema})
//
// Test code only.
package pgtest
