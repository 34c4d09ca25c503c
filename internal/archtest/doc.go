// Package archtest holds the tests that keep chatgraph's architecture
// honest: imports point one way (cmd/server -> transport -> {chatscope,
// runcontrol, nodes} -> runtime), and the runtime kernel imports no other
// package of the module and names no domain concept in its code.
package archtest
