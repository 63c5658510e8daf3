// Package pgtest gives tests a throwaway schema on the PostgreSQL server named by TRELLIS_TEST_POSTGRES.
//
// Tests that need PostgreSQL call Server, which skips them (saying how to
// run them) when the variable is unset, then FreshSchema once per store:
// each call creates an empty schema, drops it when the test ends, and
// returns the DSN with search_path set to it, so that tests running in
// parallel never see each other's tables.
package pgtest
