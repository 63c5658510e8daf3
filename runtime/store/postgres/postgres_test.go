package postgres_test

import (
	"context"
	"encoding/json"
	"sync"
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

// TestTwoDaemonsUpdateOneSetting: two stores on one schema (two daemons'
// pools) each update the same setting 500 times at once (a job definition
// is such a setting): none of the 1,000 updates is lost.
func TestTwoDaemonsUpdateOneSetting(t *testing.T) {
	dsn := pgtest.FreshSchema(t, pgtest.Server(t))
	ctx := context.Background()
	var sts []*postgres.Store
	for range 2 {
		st, err := postgres.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		sts = append(sts, st)
	}
	if err := sts[0].PutSetting(ctx, store.Unfenced(), "jobs", "j-1", json.RawMessage(`{"runs":0}`)); err != nil {
		t.Fatal(err)
	}
	const each = 500
	var wg sync.WaitGroup
	for _, st := range sts {
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := w; k < each; k += 4 {
					err := st.UpdateSetting(ctx, store.Unfenced(), "jobs", "j-1", func(old json.RawMessage) (json.RawMessage, error) {
						var v struct{ Runs int }
						if err := json.Unmarshal(old, &v); err != nil {
							return nil, err
						}
						v.Runs++
						return json.Marshal(map[string]int{"runs": v.Runs})
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	got, err := sts[1].GetSetting(ctx, "jobs", "j-1")
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Runs int }
	if err := json.Unmarshal(got, &v); err != nil || v.Runs != 2*each {
		t.Fatalf("after %d concurrent updates through 2 stores: %s (%v)", 2*each, got, err)
	}
}
