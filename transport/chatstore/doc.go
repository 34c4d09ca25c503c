// Package chatstore keeps what the HTTP API owns besides runs: saved graphs
// (with their planVersion) and chats, each a tree of messages with an
// active leaf. Runs, checkpoints and event logs live in the runtime's
// store; a message names the run that wrote it.
//
// Store is the interface; NewMemory is the in-process implementation,
// chatstore/sqlite the embedded durable one, and chatstoretest the
// conformance suite every implementation passes:
//
//	st := chatstore.NewMemory()
//	_ = st.CreateGraph(ctx, &chatstore.Graph{ID: "g1", Body: body}) // planVersion 1
//	_ = st.UpdateGraph(ctx, &chatstore.Graph{ID: "g1", Body: body2}) // planVersion 2
//
// Nothing in a chat is ever overwritten by a new turn: a retry adds a
// sibling assistant message, an edit a sibling user message.
package chatstore
