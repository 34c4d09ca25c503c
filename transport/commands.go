package transport

import (
	"context"

	"chatgraph/chat"
	"chatgraph/runcontrol"
)

// A command is one client request to the chat service — a chat call,
// resume or cancel — arriving as an HTTP request (route parameters plus
// body) or as a WebSocket frame. Both become the same clientFrame and go
// through this one table, so each rule (validation, defaults, cancel
// fallbacks, error texts) is written once; the transports only differ in
// how they answer (a 202 or an SSE stream; an ack frame and a
// subscription).
type command struct {
	// body is the shape the command's fields are validated as (the HTTP
	// body type of the same call).
	body func(f *clientFrame) any
	// needs names the ids the command cannot do without.
	needs func(f *clientFrame) error
	// run executes the validated command.
	run func(s *Server, ctx context.Context, f *clientFrame) (*commandResult, error)
}

// commandResult is what a command answers: a ticket for the runs it
// started, or the outcome of a cancel.
type commandResult struct {
	ticket *chat.Ticket
	cancel *chat.CancelResult
}

// chatCall is the command of one of the five chat calls.
func chatCall(kind chat.Kind, body func(f *clientFrame) any) command {
	return command{
		body: body,
		needs: func(f *clientFrame) error {
			if f.ChatID == "" {
				return badRequest("%s needs chatId", f.Type)
			}
			if kind != chat.KindStreamChat && kind != chat.KindStreamAgentChat && f.MessageID == "" {
				return badRequest("%s needs messageId", f.Type)
			}
			return nil
		},
		run: func(s *Server, ctx context.Context, f *clientFrame) (*commandResult, error) {
			req := chat.Request{Kind: kind, ChatID: f.ChatID, MessageID: f.MessageID, Content: f.Content, ParentID: f.ParentID,
				AgentNodeID: f.AgentNodeID, UserTools: f.UserTools, ClientRequestID: f.ClientRequestID, Idempotent: f.idempotent,
				Conn: f.conn, Strategy: runcontrol.Strategy(f.MultitaskStrategy)}
			if kind == chat.KindContinueMessage {
				req.Resume = orValue(f.Resume, f.Value)
			}
			return s.send(ctx, req)
		},
	}
}

// send sends a chat request; its ticket is the command's answer.
func (s *Server) send(ctx context.Context, req chat.Request) (*commandResult, error) {
	t, err := s.sendChat(ctx, req)
	if err != nil {
		return nil, err
	}
	return &commandResult{ticket: t}, nil
}

// sendChat is chat.Service.Send for every route (native, WebSocket,
// OpenAI-compatible, AG-UI), with the refusal of a continue that another
// request overtook worded for the client (alreadyContinued).
func (s *Server) sendChat(ctx context.Context, req chat.Request) (*chat.Ticket, error) {
	t, err := s.svc.Send(ctx, req)
	if err != nil {
		if e := s.alreadyContinued(ctx, req, err); e != nil {
			return nil, e
		}
		return nil, err
	}
	return t, nil
}

func orValue(a, b any) any {
	if a != nil {
		return a
	}
	return b
}

// commands is THE table of client commands, by frame type.
var commands = map[string]command{
	string(chat.KindStreamChat): chatCall(chat.KindStreamChat, func(f *clientFrame) any {
		return &sendBody{Content: f.Content, ParentID: f.ParentID, ClientRequestID: f.ClientRequestID, UserTools: f.UserTools,
			MultitaskStrategy: f.MultitaskStrategy, OnDisconnect: f.OnDisconnect}
	}),
	string(chat.KindStreamAgentChat): chatCall(chat.KindStreamAgentChat, func(f *clientFrame) any {
		return &agentSendBody{AgentNodeID: f.AgentNodeID, Content: f.Content, ParentID: f.ParentID, ClientRequestID: f.ClientRequestID,
			UserTools: f.UserTools, MultitaskStrategy: f.MultitaskStrategy, OnDisconnect: f.OnDisconnect}
	}),
	string(chat.KindContinueMessage): chatCall(chat.KindContinueMessage, func(f *clientFrame) any {
		return &continueBody{ClientRequestID: f.ClientRequestID, MultitaskStrategy: f.MultitaskStrategy, OnDisconnect: f.OnDisconnect}
	}),
	string(chat.KindRetryMessage): chatCall(chat.KindRetryMessage, func(f *clientFrame) any {
		return &retryBody{ClientRequestID: f.ClientRequestID, UserTools: f.UserTools, MultitaskStrategy: f.MultitaskStrategy,
			OnDisconnect: f.OnDisconnect}
	}),
	string(chat.KindEditUserMessage): chatCall(chat.KindEditUserMessage, func(f *clientFrame) any {
		return &editBody{Content: f.Content, ClientRequestID: f.ClientRequestID, UserTools: f.UserTools,
			MultitaskStrategy: f.MultitaskStrategy, OnDisconnect: f.OnDisconnect}
	}),
	// resume is continue_message for the run's assistant message.
	"resume": {
		body: func(f *clientFrame) any {
			return &resumeBody{ClientRequestID: f.ClientRequestID, MultitaskStrategy: f.MultitaskStrategy, OnDisconnect: f.OnDisconnect}
		},
		needs: func(f *clientFrame) error {
			if f.RunID == "" {
				return badRequest("resume needs runId")
			}
			return nil
		},
		run: func(s *Server, ctx context.Context, f *clientFrame) (*commandResult, error) {
			return s.send(ctx, chat.Request{Kind: chat.KindContinueMessage, FromRunID: f.RunID, Resume: orValue(f.Value, f.Resume),
				ClientRequestID: f.ClientRequestID, Idempotent: f.idempotent, Conn: f.conn, Strategy: runcontrol.Strategy(f.MultitaskStrategy)})
		},
	},
	"cancel": {
		body: func(f *clientFrame) any { return &cancelChatBody{ClientRequestID: f.ClientRequestID, Action: f.Action} },
		needs: func(f *clientFrame) error {
			if f.ChatID == "" && f.RunID == "" && f.ClientRequestID == "" {
				return badRequest("cancel needs chatId, runId or clientRequestId")
			}
			return nil
		},
		run: func(s *Server, ctx context.Context, f *clientFrame) (*commandResult, error) {
			res, err := s.svc.Cancel(ctx, chat.CancelRequest{ChatID: f.ChatID, RunID: f.RunID, ClientRequestID: f.ClientRequestID, Conn: f.conn,
				Rollback: f.Action == "rollback"})
			if err != nil {
				return nil, err
			}
			s.noteCancel(res.RunIDs)
			return &commandResult{cancel: res}, nil
		},
	},
}

// exec validates and runs one command. Ok is false for a type the table
// does not know (the caller answers it).
func (s *Server) exec(ctx context.Context, f *clientFrame) (res *commandResult, ok bool, err error) {
	cmd, ok := commands[f.Type]
	if !ok {
		return nil, false, nil
	}
	if err := s.validateStruct(cmd.body(f)); err != nil {
		return nil, true, err
	}
	if err := cmd.needs(f); err != nil {
		return nil, true, err
	}
	res, err = cmd.run(s, ctx, f)
	return res, true, err
}

// cancelRunQuietly cancels a run whose client went away (onDisconnect:
// cancel); the outcome is nobody's to read.
func (s *Server) cancelRunQuietly(runID string) {
	if res, err := s.svc.Cancel(s.base, chat.CancelRequest{RunID: runID}); err == nil {
		s.noteCancel(res.RunIDs)
	}
}
