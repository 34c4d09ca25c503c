package chat

import (
	"context"
	"time"

	"chatgraph/runtime"
)

// EnterStart takes a place among the chat calls starting at once, as a
// call does (enterStart), for tests to hold one.
func (s *Service) EnterStart(ctx context.Context) (func(), error) { return s.enterStart(ctx) }

// GraphOf is graphOf, for tests of where a turn's graph comes from.
func (s *Service) GraphOf(rec *Graph) (*runtime.Graph, error) { return s.graphOf(rec) }

// SetCommitLag replaces the engine's CommitLag as the service reads it
// (Config.BusyStartingTurns), for tests of the bound.
func (s *Service) SetCommitLag(lag func() time.Duration) { s.lag = lag }
