package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/template"

	"chatgraph/runtime"
)

type templateData struct {
	Template string `json:"template" validate:"required,max=100000"`
}

// maxTemplateOutput bounds a rendered template.
const maxTemplateOutput = 1 << 20

var templateFuncs = template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"upper": strings.ToUpper,
	"lower": strings.ToLower,
	"trim":  strings.TrimSpace,
	"join": func(sep string, v any) string {
		xs, _ := v.([]any)
		parts := make([]string, len(xs))
		for i, x := range xs {
			parts[i] = fmt.Sprint(x)
		}
		return strings.Join(parts, sep)
	},
}

func (e *env) templateType() runtime.NodeType {
	return runtime.NodeType{
		Name:  TypeTemplate,
		Label: "Template",
		Description: "Rewrites the message content with a Go text/template over the input " +
			"(a message is {{.content}}, {{.role}}; functions: json, upper, lower, trim, join).",
		Ports: []runtime.Port{flowIn(true, false), flowOut(PortOutput)},
		DataSchema: schema(`{"type":"object","required":["template"],"properties":{
			"template":{"type":"string","minLength":1,"maxLength":100000,"description":"Go text/template; the dot is the input as JSON values."}}}`),
		New: func(n *runtime.Node) (runtime.Executor, error) {
			var d templateData
			if err := e.data.decode(n, &d); err != nil {
				return nil, err
			}
			tpl, err := parseTemplate(n.ID, d.Template)
			if err != nil {
				return nil, &runtime.FieldError{Field: "template", Message: err.Error()}
			}
			return runtime.ExecutorFunc(func(ctx context.Context, _ *runtime.Node, in runtime.Inputs, _ *runtime.FlowContext) (runtime.Result, error) {
				return renderTemplate(ctx, tpl, in)
			}), nil
		},
	}
}

var errTooLong = errors.New("output too long")

type limitedBuilder struct {
	strings.Builder
	max int
}

func (b *limitedBuilder) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		return 0, errTooLong
	}
	return b.Builder.Write(p)
}

func renderTemplate(ctx context.Context, tpl *template.Template, in runtime.Inputs) (runtime.Result, error) {
	var dot any
	if len(in) > 0 {
		dot = jsonValue(in[0].Value)
	}
	b := &limitedBuilder{max: maxTemplateOutput}
	run, budget := withBudget(ctx, tpl)
	if err := run.Execute(b, dot); err != nil {
		switch {
		case errors.Is(err, errTooLong):
			return runtime.Result{}, runtime.Errorf(CodeTemplate, "template output is longer than %d bytes", maxTemplateOutput)
		case budget.stopped != nil:
			return runtime.Result{}, budget.stopped
		case errors.Is(err, errTemplateSteps):
			return runtime.Result{}, runtime.Errorf(CodeTemplate, "template takes more than %d steps (range iterations and template calls)", maxTemplateSteps)
		}
		return runtime.Result{}, runtime.Errorf(CodeTemplate, "%v", err)
	}
	m := AsMessage(dot)
	if m.Role == "" {
		m.Role = RoleUser
	}
	m.Content = b.String()
	return runtime.Result{Output: m.Value()}, nil
}
