package runtime

import (
	"context"
	"errors"
	"fmt"
)

// ErrRunNotFinished is returned by Result for a run that has not ended.
var ErrRunNotFinished = errors.New("runtime: run has not finished")

// Result rebuilds the result of a finished run from its record and
// checkpoints, as Invoke returned it to the process that executed the
// run: for a process that must act on a run's outcome when the one that
// ran it died between the run's end and its own follow-up. g is the graph
// the run executed (the version in rec.PlanVersion). Outputs are the
// checkpoints' (decoded from the store where it serialises them); Err is
// rebuilt from the record: a *NodeError naming the first failed node whose
// error the run reported, or the recorded cause of a cancel.
func (e *Engine) Result(ctx context.Context, rec *RunRecord, g *Graph) (*RunResult, error) {
	if e.store == nil {
		return nil, errors.New("runtime: rebuilding a run's result needs a store")
	}
	if !rec.Status.Finished() {
		return nil, fmt.Errorf("%w: %s is %s", ErrRunNotFinished, rec.ID, rec.Status)
	}
	p, err := e.Compile(g)
	if err != nil {
		return nil, err
	}
	cps, err := e.store.Checkpoints(ctx, rec.ID)
	if err != nil {
		return nil, err
	}
	res := &RunResult{RunID: rec.ID, Status: rec.Status, Interrupts: rec.Interrupts, LastSeq: rec.LastSeq, plan: p,
		outputs: make([]any, len(p.nodes)), states: make([]NodeStatus, len(p.nodes))}
	for _, n := range p.activeFrom(rec.EntryNodeIDs).nodes {
		res.states[n] = NodePending // active; a checkpoint says more
	}
	var failed *Checkpoint
	for _, cp := range cps {
		i, ok := p.index[cp.NodeID]
		if !ok {
			continue
		}
		res.states[i] = cp.Status
		if cp.Status == NodeSucceeded {
			res.outputs[i] = cp.Output
		}
		if cp.Status == NodeFailed && cp.Error == rec.Error && (failed == nil || cp.UpdatedAt.Before(failed.UpdatedAt)) {
			failed = cp
		}
	}
	switch {
	case rec.Status == RunFailed && failed != nil:
		res.Err = &NodeError{NodeID: failed.NodeID, Attempt: failed.Attempt, Code: failed.ErrorCode, Err: errors.New(failed.Error)}
	case rec.Status == RunFailed || rec.Status == RunCancelled:
		res.Err = errors.New(rec.Error)
	}
	return res, nil
}
