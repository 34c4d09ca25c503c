package controltest

import (
	"context"
	"errors"
	"sync/atomic"

	"chatgraph/runcontrol"
)

// Unreachable is a Controller that cannot say whether a run is bound
// while Down is set: Active of a run scope fails, as it does when Redis
// is unreachable, and Asked counts those failed questions. Everything
// else goes to the Controller it wraps.
type Unreachable struct {
	runcontrol.Controller
	Down  atomic.Bool
	Asked atomic.Int64
}

// ErrUnreachable is what Active of a run scope answers while Down is set.
var ErrUnreachable = errors.New("dial tcp 127.0.0.1:6379: connection refused")

// Active implements runcontrol.Controller.
func (c *Unreachable) Active(ctx context.Context, scope runcontrol.Scope) ([]string, error) {
	if scope.Kind == runcontrol.KindRun && c.Down.Load() {
		c.Asked.Add(1)
		return nil, ErrUnreachable
	}
	return c.Controller.Active(ctx, scope)
}
