package chat

import (
	"context"

	"chatgraph/runtime"
)

// EnterStart takes a place among the chat calls starting at once, as a
// call does (enterStart), for tests to hold one.
func (s *Service) EnterStart(ctx context.Context) (func(), error) { return s.enterStart(ctx) }

// GraphOf is graphOf, for tests of where a turn's graph comes from.
func (s *Service) GraphOf(rec *Graph) (*runtime.Graph, error) { return s.graphOf(rec) }
