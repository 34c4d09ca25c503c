// Package storetest is the conformance suite every runtime.Store runs, so
// the in-memory store can never drift from the durable ones. It covers run
// records, node checkpoints, the event log, fencing, and — when the store
// implements them — the runtime.Leaser, runtime.Inspector,
// runtime.BatchWriter and runtime.EffectLedger contracts.
//
// A backend's test opens a fresh, empty store per subtest and registers
// its cleanup with t.Cleanup:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) runtime.Store {
//			st, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "s.db")})
//			require.NoError(t, err)
//			t.Cleanup(func() { st.Close() })
//			return st
//		}, storetest.Durable(reopen))
//	}
//
// Durable stores pass a reopen function with storetest.Durable: it enables
// the tests that restart the store and that race two store instances (two
// processes) over one database.
//
// BenchAppendEvent, BenchSaveCheckpoint and BenchWriteBatch are the shared
// benchmark bodies.
package storetest
