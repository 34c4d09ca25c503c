package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
)

// Calculator limits.
const (
	maxExpressionLen   = 2000
	defaultCalcCost    = 10000
	calculatorDeadline = time.Second
)

var calculatorSchema = json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string","description":"An arithmetic expression, e.g. (2+3)*4 or math.sqrt(2)/2"}},"required":["expression"],"additionalProperties":false}`)

type calculator struct {
	env  *cel.Env
	cost uint64
}

// Calculator returns the calculator tool: {"expression":"6*7"} -> "42".
// Expressions are CEL (https://cel.dev) with the math extension; integer
// literals count as real numbers, so 7/2 is 3.5. Evaluation is bounded
// by costLimit CEL cost units (default 10000) and one second.
func Calculator(costLimit uint64) (Tool, error) {
	if costLimit == 0 {
		costLimit = defaultCalcCost
	}
	env, err := cel.NewEnv(ext.Math())
	if err != nil {
		return nil, fmt.Errorf("tools: calculator environment: %w", err)
	}
	return &calculator{env: env, cost: costLimit}, nil
}

func (c *calculator) Spec() Spec {
	return Spec{Name: "calculator", Description: "Evaluates an arithmetic expression and returns the number. Supports + - * / %, parentheses, comparisons and math.* functions (math.sqrt, math.abs, math.ceil, math.floor, math.round, math.greatest, math.least).", Parameters: calculatorSchema}
}

func (c *calculator) Invoke(ctx context.Context, call Call) (string, error) {
	var a struct {
		Expression string `json:"expression"`
	}
	if err := DecodeArgs(call, &a); err != nil {
		return "", err
	}
	return c.Eval(ctx, a.Expression)
}

// Eval evaluates one expression.
func (c *calculator) Eval(ctx context.Context, expr string) (string, error) {
	expr = strings.TrimSpace(expr)
	switch {
	case expr == "":
		return "", fmt.Errorf("%w: expression is empty", ErrInvalidArguments)
	case len(expr) > maxExpressionLen:
		return "", fmt.Errorf("%w: expression is longer than %d bytes", ErrInvalidArguments, maxExpressionLen)
	}
	prg, err := c.compile(realLiterals(expr))
	if err != nil {
		// The rewrite can break valid integer expressions (list indexes,
		// bit operations): try the expression as written.
		var err2 error
		if prg, err2 = c.compile(expr); err2 != nil {
			return "", err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, calculatorDeadline)
	defer cancel()
	out, _, err := prg.ContextEval(ctx, cel.NoVars())
	if err != nil {
		return "", fmt.Errorf("evaluate: %w", err)
	}
	return formatValue(out.Value())
}

func (c *calculator) compile(expr string) (cel.Program, error) {
	ast, iss := c.env.Compile(expr)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArguments, iss.Err())
	}
	est, err := c.env.EstimateCost(ast, calcSizes{})
	if err != nil {
		return nil, err
	}
	if est.Max > c.cost {
		return nil, fmt.Errorf("%w: expression is too costly (estimated %d, limit %d)", ErrInvalidArguments, est.Max, c.cost)
	}
	return c.env.Program(ast, cel.CostLimit(c.cost), cel.InterruptCheckFrequency(32))
}

type calcSizes struct{}

func (calcSizes) EstimateSize(checker.AstNode) *checker.SizeEstimate {
	return &checker.SizeEstimate{Min: 0, Max: 1000}
}
func (calcSizes) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

func formatValue(v any) (string, error) {
	switch x := v.(type) {
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return "", errors.New("result is not a finite number (division by zero?)")
		}
		return FormatNumber(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case bool:
		return strconv.FormatBool(x), nil
	case string:
		return x, nil
	case types.Null:
		return "null", nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v), nil
	}
	return string(b), nil
}

// FormatNumber prints a float the way a calculator shows it: integral
// values without a fraction, others with up to 12 significant digits.
func FormatNumber(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', 12, 64)
}

// realLiterals rewrites decimal integer literals outside string literals
// as doubles (6 -> 6.0), so mixed arithmetic and division behave like a
// calculator rather than like integer CEL.
func realLiterals(expr string) string {
	var b strings.Builder
	b.Grow(len(expr) + 8)
	i := 0
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(expr))
			b.WriteString(expr[i:j])
			i = j
		case isIdentStart(c):
			j := i
			for j < len(expr) && (isIdentStart(expr[j]) || isDigit(expr[j])) {
				j++
			}
			b.WriteString(expr[i:j])
			i = j
		case isDigit(c) || (c == '.' && i+1 < len(expr) && isDigit(expr[i+1]) && (i == 0 || !isOperand(expr[i-1]))):
			j := i
			real := false
			if c == '0' && j+1 < len(expr) && (expr[j+1] == 'x' || expr[j+1] == 'X') {
				real = true // hex: leave as is
				j += 2
				for j < len(expr) && (isDigit(expr[j]) || strings.IndexByte("abcdefABCDEF", expr[j]) >= 0) {
					j++
				}
			}
			for j < len(expr) && isDigit(expr[j]) {
				j++
			}
			if j < len(expr) && expr[j] == '.' && j+1 < len(expr) && isDigit(expr[j+1]) {
				real = true
				j++
				for j < len(expr) && isDigit(expr[j]) {
					j++
				}
			}
			if j < len(expr) && (expr[j] == 'e' || expr[j] == 'E') {
				k := j + 1
				if k < len(expr) && (expr[k] == '+' || expr[k] == '-') {
					k++
				}
				if k < len(expr) && isDigit(expr[k]) {
					real = true
					j = k
					for j < len(expr) && isDigit(expr[j]) {
						j++
					}
				}
			}
			if j < len(expr) && (expr[j] == 'u' || expr[j] == 'U') {
				real = true
				j++
			}
			b.WriteString(expr[i:j])
			if !real {
				b.WriteString(".0")
			}
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isOperand(c byte) bool    { return isIdentStart(c) || isDigit(c) || c == ')' || c == ']' }
