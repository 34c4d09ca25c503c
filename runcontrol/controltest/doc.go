// Package controltest is the conformance suite every runcontrol.Controller
// implementation runs, so the in-memory controller can never drift from the
// Redis one:
//
//	func TestConformance(t *testing.T) {
//		controltest.Run(t, func(t *testing.T, o controltest.Options) func() runcontrol.Controller {
//			m := runcontrol.NewMemory(runcontrol.MemoryConfig{IntentTTL: o.IntentTTL})
//			t.Cleanup(func() { m.Close() })
//			return func() runcontrol.Controller { return m }
//		})
//	}
//
// It covers cancel of bound runs per scope kind, pending intents (consumed
// by the next bind, already cancelled at Bind return), run ids that are
// unknown or finished, the five distinct causes, invalid input, cancel
// across instances, intent expiry, release, Close, and RaceIterations
// randomised interleavings of Cancel against Bind on two instances.
//
// Unreachable wraps a Controller for the tests of its users: while set
// down it cannot say whether a run is bound, as when Redis is
// unreachable.
package controltest
