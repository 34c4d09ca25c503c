// Package memory is the in-process chat.Store: graphs, chats and message
// trees in maps, lost on exit; for tests and servers that need no
// durability. Its turns reserve their runs in the runtime.Store it is
// given, under the chat store's lock, so a refused turn writes neither
// messages nor a reservation.
//
//	runs := rmemory.New() // chatgraph/runtime/store/memory
//	chats := memory.New(runs)
//	eng, _ := runtime.NewEngine(runtime.Config{Registry: reg, Store: runs})
package memory
