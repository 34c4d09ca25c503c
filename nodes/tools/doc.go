// Package tools is the registry of tools agents can call: a Tool is a
// name, a description, a JSON Schema of its arguments and a function.
//
// Built-ins (RegisterBuiltins): calculator (CEL arithmetic with a cost
// limit), current_time and http_request (GET/POST to an allowlist of hosts,
// with size and time limits). Add your own in Go:
//
//	reg := tools.NewRegistry()
//	_ = tools.RegisterBuiltins(reg, tools.Config{HTTP: tools.HTTPConfig{AllowedHosts: []string{"api.example.com"}}})
//	_ = reg.Register(tools.New(tools.Spec{
//		Name:        "greet",
//		Description: "Greets someone.",
//		Parameters:  json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`),
//	}, func(ctx context.Context, c tools.Call) (string, error) {
//		var a struct{ Name string }
//		if err := tools.DecodeArgs(c, &a); err != nil {
//			return "", err
//		}
//		return "hello " + a.Name, nil
//	}))
//
// Every call carries an IdempotencyKey that is stable across retries and
// resumes of the run that made it; tools with side effects should pass it
// on (http_request sends it as the Idempotency-Key header on POST).
package tools
