// Package chat is chatgraph's chat application: chats are message trees
// over saved graphs, and every chat call (stream_chat, stream_agent_chat,
// continue_message, retry_message, edit_user_message), run resume,
// cancel, recovery and retention is a method of Service.
//
// Every run a chat starts, continues or recovers goes through one launch
// path: it is admitted against the process's limits, bound under run
// control (so a cancel that came first still wins), given its chat's turn
// (double texting), and executed by the runtime engine with its events
// handed to the caller's Publisher. A turn's messages and the reservation
// of its run are written in one transaction of the Store, which lives in
// the same database as the run store. A run's input references the
// chat's history (the message its branch ends at) instead of copying it;
// the run's services resolve it for entry agents (see history.go).
//
// Stores: chat/store/memory (tests), chat/store/sqlite (the embedded
// default, in the run store's file) and chat/store/postgres (several
// server processes), all checked by chat/store/storetest.
package chat
