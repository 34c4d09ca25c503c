// Package chatstoretest is the conformance suite every chatstore.Store
// implementation passes:
//
//	func TestConformance(t *testing.T) {
//		chatstoretest.Run(t, func(t *testing.T) chatstore.Store { return chatstore.NewMemory() })
//	}
package chatstoretest
