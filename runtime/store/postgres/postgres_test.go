package postgres_test

import (
	"context"
	"testing"

	"github.com/trellis-run/trellis/runtime/store"
	"github.com/trellis-run/trellis/runtime/store/conformance"
	"github.com/trellis-run/trellis/runtime/store/postgres"
	"github.com/trellis-run/trellis/runtime/store/postgres/pgtest"
)

func TestConformance(t *testing.T) {
	server := pgtest.Server(t)
	conformance.Run(t, func(t *testing.T) store.Store {
		st, err := postgres.Open(context.Background(), pgtest.FreshSchema(t, server))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	})
}
