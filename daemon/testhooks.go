package daemon

import (
	"path/filepath"
	"sync"

	"github.com/trellis-run/trellis/runtime/store"
)

// storeWrappers holds the store wrappers tests installed, by absolute home
// directory.
var storeWrappers sync.Map // string → func(store.Store) store.Store

// WrapStoreForTest makes every daemon started with home, until undo is
// called, run on wrap(its store) instead of the store itself. It
// exists for fault-injection tests (a disk that fills up, a store that turns
// read-only): the wrapper decides which calls fail and how. Keyed by home,
// so that daemons of other tests in the same process are not affected.
func WrapStoreForTest(home string, wrap func(store.Store) store.Store) (undo func()) {
	key := homeKey(home)
	storeWrappers.Store(key, wrap)
	return func() { storeWrappers.Delete(key) }
}

// testStore returns st, or st wrapped by what a test installed for home
// with WrapStoreForTest. newRuntimeServices calls it right after opening the
// store, whatever the backend.
func testStore(home string, st store.Store) store.Store {
	if wrap, ok := storeWrappers.Load(homeKey(home)); ok {
		return wrap.(func(store.Store) store.Store)(st)
	}
	return st
}

func homeKey(home string) string {
	if abs, err := filepath.Abs(home); err == nil {
		return abs
	}
	return home
}
