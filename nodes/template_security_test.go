package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chatgraph/nodes"
	"chatgraph/runtime"
)

// templateExec builds a template executor directly, with the node types'
// validation.
func templateExec(t *testing.T, src string) (runtime.Executor, *runtime.Node, error) {
	t.Helper()
	reg := runtime.NewRegistry()
	require.NoError(t, nodes.Register(reg, nodes.Deps{}))
	typ, ok := reg.Lookup(nodes.TypeTemplate)
	require.True(t, ok)
	data, err := json.Marshal(map[string]string{"template": src})
	require.NoError(t, err)
	n := &runtime.Node{ID: "t", Type: nodes.TypeTemplate, Data: data}
	ex, err := typ.New(n)
	return ex, n, err
}

func TestTemplateRejectsRangeOverNumbers(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		`{{range 200000000}}{{end}}`,
		`{{range $i := 5}}x{{end}}`,
		`{{$n := 100000000}}{{range $n}}{{end}}`,
		`{{$n := 1}}{{$n = 100000000}}{{range $n}}{{end}}`,
		`{{range len .content}}{{end}}`,
		`{{define "x"}}{{range 9}}{{end}}{{end}}hi`,
		`{{if .content}}{{range (1000000000)}}{{end}}{{end}}`,
	} {
		rejected(t, src, "range over a number")
	}
	// Recursion (direct or through another template) is refused.
	for _, src := range []string{
		`{{define "a"}}{{range $.items}}{{template "a" $}}{{end}}{{end}}{{template "a" .}}`,
		`{{define "a"}}{{template "b" .}}{{end}}{{define "b"}}{{with .x}}{{template "a" .}}{{end}}{{end}}{{template "a" .}}`,
	} {
		rejected(t, src, "recursion is not allowed")
	}
	for _, src := range []string{`{{range .items}}{{.}}{{end}}`, `{{$n := 3}}{{$n}}{{range .items}}{{$n}}{{end}}`,
		`{{define "a"}}x{{end}}{{template "a"}}{{template "a"}}`} {
		_, _, err := templateExec(t, src)
		require.NoError(t, err, src)
	}
}

func rejected(t *testing.T, src, msg string) {
	t.Helper()
	_, _, err := templateExec(t, src)
	var fe *runtime.FieldError
	require.ErrorAs(t, err, &fe, src)
	require.Equal(t, "template", fe.Field)
	require.Contains(t, fe.Message, msg, src)
}

// items returns an input whose "items" list nested ranges multiply.
func items(n int) runtime.Inputs {
	xs := make([]any, n)
	for i := range xs {
		xs[i] = float64(i)
	}
	return runtime.Inputs{{Value: map[string]any{"items": xs}}}
}

// Nested ranges over input data (1000^3 iterations) end with the step
// budget, not after a billion iterations.
func TestTemplateStepBudget(t *testing.T) {
	t.Parallel()
	ex, n, err := templateExec(t, `{{range .items}}{{range $.items}}{{range $.items}}{{end}}{{end}}{{end}}`)
	require.NoError(t, err)
	_, err = ex.Execute(context.Background(), n, items(1000), nil)
	require.Error(t, err)
	require.Equal(t, nodes.CodeTemplate, runtime.ErrorCode(err))
	require.Contains(t, err.Error(), "steps")

	// Calls of defined templates count as well.
	ex, n, err = templateExec(t, `{{define "a"}}{{range $.items}}{{end}}{{end}}{{range .items}}{{range $.items}}{{template "a" $}}{{end}}{{end}}`)
	require.NoError(t, err)
	_, err = ex.Execute(context.Background(), n, items(1000), nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "steps")

	// A template within the budget renders as before.
	ex, n, err = templateExec(t, `{{range .items}}{{.}},{{end}}`)
	require.NoError(t, err)
	res, err := ex.Execute(context.Background(), n, items(3), nil)
	require.NoError(t, err)
	require.Equal(t, "0,1,2,", res.Output.(map[string]any)["content"])
}

// A cancel stops a rendering that would run for minutes: Execute returns
// the cancel's cause, so the node stops using CPU instead of being
// abandoned still spinning.
func TestTemplateStopsOnCancel(t *testing.T) {
	t.Parallel()
	// Each step encodes the 1000-item list: the budget alone would take
	// far longer than this test's bound.
	ex, n, err := templateExec(t, `{{range .items}}{{range $.items}}{{$x := json $.items}}{{end}}{{end}}`)
	require.NoError(t, err)
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("stop pressed")
	done := make(chan error, 1)
	go func() {
		_, err := ex.Execute(ctx, n, items(1000), nil)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let the rendering get going
	cancelled := time.Now()
	cancel(stop)
	select {
	case err := <-done:
		t.Logf("rendering returned %v after the cancel", time.Since(cancelled))
		require.ErrorIs(t, err, stop)
	case <-time.After(30 * time.Second): // a bound for a rendering that ignores the cancel
		t.Fatal("the rendering did not stop on cancel")
	}
}
