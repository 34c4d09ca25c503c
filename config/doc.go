// Package config reads chatgraph's deployment file (--config /
// CHATGRAPH_CONFIG): the model providers and the MCP servers one server
// process offers to graphs. See docs/nodes.md, "Model providers" and
// "Tools from MCP servers", for the format.
//
//	setup, err := config.Load("chatgraph.json", config.Options{Getenv: os.Getenv, Logger: log})
//	defer setup.Close() // ends the MCP sessions (stdio servers exit)
//	err = nodes.Register(reg, setup.Deps())
//
// Secrets never live in the file: a provider names the environment
// variable holding its key (apiKeyEnv), and header and env values may say
// ${VAR}. They are expanded when the file is loaded; a variable that is
// not set is an error. Nothing here is ever returned by the API or logged.
package config
