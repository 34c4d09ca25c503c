// Package storetest is the conformance suite every chat.Store runs, so the
// in-memory store can never drift from the durable ones. It covers graphs
// and their versions, chats and message trees, turns (messages and the
// run's reservation written together, or nothing), the claim a continue
// makes (exactly one of racing claims wins), FinishMessage's
// compare-and-set on the message's run, and that closing a chat store
// leaves its run store open.
//
// A backend's test opens a fresh, empty chat store on a fresh run store
// per subtest, registers their cleanup, and returns both:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) (chat.Store, runtime.Store) {
//			runs := rmemory.New()
//			return memory.New(runs), runs
//		})
//	}
//
// Durable stores pass a reopen function with storetest.Durable: it opens
// a second pair of stores on the same database (another process), for
// the restart test and for races between two instances. Stores pass
// storetest.Expiry (a test hook that sets their clock, and a count of
// their tombstones) for the test of tombstones' expiry.
package storetest
