// Package llm is chatgraph's access to language models: one small
// streaming interface (Provider), the deterministic offline model Echo
// (the default, no key needed), an OpenAI-compatible provider (OpenAI,
// Azure OpenAI, Ollama, vLLM, llama.cpp server, LM Studio...) and an
// Anthropic provider, both through the vendors' official Go SDKs.
//
// Models maps the model names node data uses to providers:
//
//	models := llm.NewModels() // "echo" is always there
//	oa, _ := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: "http://localhost:11434/v1"})
//	_ = models.Register("ollama", oa, "llama3.1") // "ollama/llama3.1" -> oa with model "llama3.1"
//	p, model, err := models.Resolve("ollama/llama3.1")
//	resp, err := p.Stream(ctx, llm.Request{Model: model, Messages: msgs}, func(s string) { fmt.Print(s) })
//
// Models.List and Models.Providers describe what is configured (no
// secrets), for model pickers.
//
// Errors from providers are *Error values with a stable Code (ErrorCode
// method), so node retry policies can match them; Retryable marks rate
// limits and server-side failures, RetryAfter the server's hint.
package llm
