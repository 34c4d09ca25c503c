// Names for the wire types. Everything with a schema in docs/openapi.json
// comes from the generated file (npm run gen:api, run by every build), so
// a change of the contract breaks the type check instead of drifting.
import type { components } from './openapi.gen'

type S = components['schemas']

export type GraphInput = S['GraphInput']
export type SavedGraph = S['SavedGraph']
export type GraphSummary = S['GraphSummary']
export type GraphNode = S['Node']
export type GraphEdge = S['Edge']
export type EdgeData = S['EdgeData']
export type Diagnostic = S['Diagnostic']
export type ValidateResult = S['ValidateResult']
export type NodeType = S['NodeType']
export type Port = S['Port']
export type Chat = S['Chat']
export type Message = S['Message']
export type Run = S['Run']
export type NodeState = S['NodeState']
export type Interrupt = S['Interrupt']
export type RunEvent = S['Event']
export type EventType = RunEvent['type']
export type RunTicket = S['RunTicket']
export type CancelResult = S['CancelResult']
export type ApiErrorBody = S['Error']
export type SendMessage = S['SendMessage']
export type SendAgentMessage = S['SendAgentMessage']

export type Channel = NonNullable<EdgeData['channel']>
export type When = NonNullable<EdgeData['when']>

// WebSocket frames. The OpenAPI document describes them in prose only
// (GET /api/v1/ws), so their shapes are written here, built from the
// HTTP bodies they mirror.
export type ChatCallType =
  | 'stream_chat'
  | 'stream_agent_chat'
  | 'continue_message'
  | 'retry_message'
  | 'edit_user_message'

export type ClientFrame =
  | ({ id: string; type: ChatCallType; chatId: string; messageId?: string; agentNodeId?: string; resume?: unknown } & Partial<
      Pick<SendMessage, 'content' | 'parentId' | 'userTools' | 'multitaskStrategy' | 'onDisconnect'>
    >)
  | { id: string; type: 'cancel'; chatId?: string; runId?: string; clientRequestId?: string; action?: 'interrupt' | 'rollback' }
  | { id: string; type: 'resume'; runId: string; value: unknown }
  | { id: string; type: 'subscribe'; runId: string; afterSeq: number }
  | { id: string; type: 'unsubscribe'; runId: string }

export interface AckFrame {
  type: 'ack'
  id: string
  runId?: string
  messageId?: string
  userMessageId?: string
  chatId?: string
  status?: CancelResult['status']
  runIds?: string[]
}
export interface EventFrame {
  type: 'event'
  event: RunEvent
}
export interface ErrorFrame {
  type: 'error'
  id?: string
  error: ApiErrorBody
}
export type ServerFrame = AckFrame | EventFrame | ErrorFrame
