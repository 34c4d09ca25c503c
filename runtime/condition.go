package runtime

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
)

// conditionVar is the name a condition uses for its source node's output
// (or, on failure edges, for the error payload {error, code, nodeId}).
const conditionVar = "output"

// assumedCollectionSize is the size the cost estimator assumes for a list,
// map or string of unknown size when bounding a condition's cost.
const assumedCollectionSize = 1000

type conditions struct {
	env       *cel.Env
	costLimit uint64
}

func newConditions(costLimit uint64) (*conditions, error) {
	env, err := cel.NewEnv(cel.Variable(conditionVar, cel.DynType))
	if err != nil {
		return nil, err
	}
	return &conditions{env: env, costLimit: costLimit}, nil
}

// compile checks an expression: it must parse, type-check to bool (or dyn)
// and have an estimated worst-case cost within the limit.
func (c *conditions) compile(expr string) (cel.Program, string, error) {
	ast, iss := c.env.Compile(expr)
	if iss != nil && iss.Err() != nil {
		return nil, CodeInvalidCondition, iss.Err()
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, CodeInvalidCondition, fmt.Errorf("condition must be a bool expression, not %s", t)
	}
	est, err := c.env.EstimateCost(ast, sizeEstimator{})
	if err != nil {
		return nil, CodeInvalidCondition, err
	}
	if est.Max > c.costLimit {
		return nil, CodeConditionCost, fmt.Errorf("estimated cost %d exceeds the limit %d", est.Max, c.costLimit)
	}
	prg, err := c.env.Program(ast, cel.CostLimit(c.costLimit), cel.InterruptCheckFrequency(64))
	if err != nil {
		return nil, CodeInvalidCondition, err
	}
	return prg, "", nil
}

type sizeEstimator struct{}

func (sizeEstimator) EstimateSize(checker.AstNode) *checker.SizeEstimate {
	return &checker.SizeEstimate{Min: 0, Max: assumedCollectionSize}
}

func (sizeEstimator) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// evalCondition runs a compiled condition over v, honouring ctx and the
// runtime cost limit. Values CEL cannot take natively (structs) are passed
// through their JSON form.
func evalCondition(ctx context.Context, prg cel.Program, v any) (bool, error) {
	act := map[string]any{conditionVar: celValue(v)}
	out, _, err := prg.ContextEval(ctx, act)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("condition returned %s, not bool", out.Type().TypeName())
	}
	return b, nil
}

func celValue(v any) any {
	switch v.(type) {
	case nil, bool, string, float64, int, int64, uint64, []any, map[string]any, []string, map[string]string:
		return v
	}
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return v
	}
	return out
}
