package chat

import "context"

// EnterStart takes a place among the chat calls starting at once, as a
// call does (enterStart), for tests to hold one.
func (s *Service) EnterStart(ctx context.Context) (func(), error) { return s.enterStart(ctx) }
