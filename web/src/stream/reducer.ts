// The stream reducer: run events (from the WebSocket, SSE or a replayed
// log) -> what the UI shows. Pure and deterministic. Events of a run have
// a gap-free seq starting at 1, so the reducer applies them strictly in
// seq order: a duplicate (seq already applied, or already buffered) is
// dropped, an early event (a gap before it) waits in `buffered` until the
// gap is filled. That is what makes a reconnect that resubscribes from
// the last seq lose and duplicate nothing, whatever the delivery order.
import type { Interrupt, RunEvent } from '../api/types'

export type RunStatus = 'pending' | 'running' | 'completed' | 'failed' | 'cancelled' | 'interrupted'
export type NodeStatus = 'pending' | 'running' | 'completed' | 'failed' | 'skipped' | 'cancelled' | 'interrupted'

export interface ToolCallView {
  id: string
  name: string
  arguments?: unknown
  requiresApproval?: boolean
  result?: string
  error?: string
  approval?: { approved: boolean; reason?: string }
  replayed?: boolean
  agentNodeId?: string
}

export interface RetryView {
  attempt: number
  delayMs?: number
  error?: string
  code?: string
  seq: number
}

export interface NodeView {
  id: string
  status: NodeStatus
  attempt: number
  replayed: boolean
  /** Streamed text of the current attempt (node_delta); restarts on node_retrying. */
  text: string
  output?: unknown
  error?: string
  errorCode?: string
  skipReason?: string
  /** node_started data (agents: inputMode, messageCount, tools, model). */
  started?: Record<string, unknown>
  retries: RetryView[]
  toolCalls: ToolCallView[]
  startedAt?: string
  endedAt?: string
  durationMs?: number
}

export interface ApprovalView {
  nodeId: string
  seq: number
  kind: string
  prompt?: string
  toolCall?: ToolCallView
  input?: unknown
  interruptId?: string
}

export interface RunView {
  runId: string
  chatId?: string
  status: RunStatus
  /** Highest seq applied; every event up to it was applied exactly once. */
  lastSeq: number
  /** Events that arrived before an earlier seq, keyed by seq. */
  buffered: Record<number, RunEvent>
  /** Applied events in seq order (the inspector's timeline). */
  events: RunEvent[]
  kind?: string
  graphId?: string
  planVersion?: number
  messageId?: string
  userMessageId?: string
  parentRunId?: string
  entryNodeIds: string[]
  activeNodeIds: string[]
  nodes: Record<string, NodeView>
  /** Node ids in the order they started. */
  nodeOrder: string[]
  /** edge id -> seq of its edge_taken */
  edgesTaken: Record<string, number>
  approvals: ApprovalView[]
  interrupts: Interrupt[]
  error?: string
  startedAt?: string
  endedAt?: string
  /** The node that streamed text last (the live answer). */
  textNodeId?: string
  /** Events dropped as duplicates (for tests and the inspector). */
  duplicates: number
}

export interface StreamState {
  runs: Record<string, RunView>
}

export type StreamAction =
  | { type: 'event'; event: RunEvent }
  | { type: 'events'; events: RunEvent[] }
  | { type: 'forget'; runId: string }

export const initialStreamState: StreamState = { runs: {} }

const terminalRun: Partial<Record<string, RunStatus>> = {
  run_completed: 'completed',
  run_failed: 'failed',
  run_cancelled: 'cancelled',
  run_interrupted: 'interrupted',
}

const terminalNode: Partial<Record<string, NodeStatus>> = {
  node_completed: 'completed',
  node_failed: 'failed',
  node_cancelled: 'cancelled',
  node_interrupted: 'interrupted',
}

export function isRunFinished(s: RunStatus | undefined): boolean {
  return s === 'completed' || s === 'failed' || s === 'cancelled' || s === 'interrupted'
}

export function emptyRun(runId: string): RunView {
  return {
    runId,
    status: 'pending',
    lastSeq: 0,
    buffered: {},
    events: [],
    entryNodeIds: [],
    activeNodeIds: [],
    nodes: {},
    nodeOrder: [],
    edgesTaken: {},
    approvals: [],
    interrupts: [],
    duplicates: 0,
  }
}

export function streamReducer(state: StreamState, action: StreamAction): StreamState {
  switch (action.type) {
    case 'event':
      return applyEvents(state, [action.event])
    case 'events':
      return applyEvents(state, action.events)
    case 'forget': {
      if (!state.runs[action.runId]) return state
      const runs = { ...state.runs }
      delete runs[action.runId]
      return { runs }
    }
  }
}

function applyEvents(state: StreamState, events: RunEvent[]): StreamState {
  if (events.length === 0) return state
  const runs = { ...state.runs }
  const touched = new Set<string>()
  for (const ev of events) {
    if (!ev || typeof ev.seq !== 'number' || !ev.runId) continue
    let run = runs[ev.runId]
    if (!touched.has(ev.runId)) {
      run = cloneRun(run ?? emptyRun(ev.runId))
      runs[ev.runId] = run
      touched.add(ev.runId)
    }
    accept(run!, ev)
  }
  return { runs }
}

/** Shallow copy of the parts accept mutates (node views are replaced, not mutated). */
function cloneRun(r: RunView): RunView {
  return {
    ...r,
    buffered: { ...r.buffered },
    events: r.events.slice(),
    nodes: { ...r.nodes },
    nodeOrder: r.nodeOrder.slice(),
    edgesTaken: { ...r.edgesTaken },
    approvals: r.approvals.slice(),
  }
}

function accept(run: RunView, ev: RunEvent) {
  if (ev.seq <= run.lastSeq || run.buffered[ev.seq]) {
    run.duplicates++
    return
  }
  if (ev.seq !== run.lastSeq + 1) {
    run.buffered[ev.seq] = ev
    return
  }
  apply(run, ev)
  for (let next = run.buffered[run.lastSeq + 1]; next; next = run.buffered[run.lastSeq + 1]) {
    delete run.buffered[next.seq]
    apply(run, next)
  }
}

function node(run: RunView, id: string): NodeView {
  const n = run.nodes[id]
  const copy: NodeView = n
    ? { ...n, retries: n.retries.slice(), toolCalls: n.toolCalls.slice() }
    : { id, status: 'pending', attempt: 0, replayed: false, text: '', retries: [], toolCalls: [] }
  run.nodes[id] = copy
  return copy
}

type Data = Record<string, unknown>

function str(v: unknown): string | undefined {
  return typeof v === 'string' ? v : undefined
}

function apply(run: RunView, ev: RunEvent) {
  run.lastSeq = ev.seq
  run.events.push(ev)
  if (ev.chatId) run.chatId = ev.chatId
  const d = (ev.data ?? {}) as Data
  const t = ev.type
  if (t === 'run_started') {
    run.status = 'running'
    run.startedAt = ev.time
    run.kind = str(d.kind)
    run.graphId = str(d.graphId)
    run.planVersion = typeof d.planVersion === 'number' ? d.planVersion : undefined
    run.messageId = str(d.messageId)
    run.userMessageId = str(d.userMessageId)
    run.parentRunId = str(d.parentRunId)
    run.entryNodeIds = Array.isArray(d.entryNodeIds) ? (d.entryNodeIds as string[]) : []
    run.activeNodeIds = Array.isArray(d.activeNodeIds) ? (d.activeNodeIds as string[]) : []
    for (const id of run.activeNodeIds) if (!run.nodes[id]) node(run, id)
    return
  }
  const rs = terminalRun[t]
  if (rs) {
    run.status = rs
    run.endedAt = ev.time
    run.error = str(d.error) ?? str(d.cause)
    if (rs === 'interrupted' && Array.isArray(d.interrupts)) run.interrupts = d.interrupts as Interrupt[]
    return
  }
  if (t === 'edge_taken') {
    const id = str(d.edgeId)
    if (id) run.edgesTaken[id] = ev.seq
    return
  }
  if (!ev.nodeId) return
  if (run.status === 'pending') run.status = 'running' // joined mid-run without run_started
  const n = node(run, ev.nodeId)
  if (typeof ev.attempt === 'number' && ev.attempt > 0) n.attempt = ev.attempt
  switch (t) {
    case 'node_started':
      n.status = 'running'
      n.startedAt = ev.time
      n.started = d
      n.replayed = d.replayed === true
      n.text = ''
      if (!run.nodeOrder.includes(n.id)) run.nodeOrder.push(n.id)
      return
    case 'node_delta': {
      const text = str(d.text) ?? ''
      n.text += text
      if (text) run.textNodeId = n.id
      return
    }
    case 'node_retrying': {
      n.retries.push({
        attempt: typeof d.attempt === 'number' ? d.attempt : n.attempt,
        delayMs: typeof d.delayMs === 'number' ? d.delayMs : undefined,
        error: str(d.error),
        code: str(d.code),
        seq: ev.seq,
      })
      if (typeof d.attempt === 'number') n.attempt = d.attempt
      n.text = '' // the new attempt streams its text again
      n.toolCalls = []
      return
    }
    case 'tool_call': {
      const id = str(d.id) ?? `call_${ev.seq}`
      const call: ToolCallView = {
        id,
        name: str(d.name) ?? '?',
        arguments: d.arguments,
        requiresApproval: d.requiresApproval === true,
        replayed: d.replayed === true,
        agentNodeId: str(d.agentNodeId),
      }
      const i = n.toolCalls.findIndex((c) => c.id === id)
      if (i >= 0) n.toolCalls[i] = { ...n.toolCalls[i], ...call }
      else n.toolCalls.push(call)
      return
    }
    case 'tool_result': {
      const id = str(d.id) ?? ''
      const i = n.toolCalls.findIndex((c) => c.id === id)
      const base: ToolCallView = i >= 0 ? n.toolCalls[i] : { id, name: str(d.name) ?? '?' }
      const upd: ToolCallView = {
        ...base,
        result: str(d.result),
        error: str(d.error),
        approval: d.approval as ToolCallView['approval'],
        replayed: base.replayed || d.replayed === true,
      }
      if (i >= 0) n.toolCalls[i] = upd
      else n.toolCalls.push(upd)
      return
    }
    case 'approval_required': {
      const tc = d.toolCall as Data | undefined
      run.approvals.push({
        nodeId: n.id,
        seq: ev.seq,
        kind: str(d.kind) ?? 'node',
        prompt: str(d.prompt),
        input: d.input,
        toolCall: tc
          ? { id: str(tc.id) ?? '', name: str(tc.name) ?? '?', arguments: tc.arguments, agentNodeId: str(tc.agentNodeId) }
          : undefined,
      })
      return
    }
    case 'node_skipped':
      n.status = 'skipped'
      n.skipReason = str(d.reason)
      n.endedAt = ev.time
      return
  }
  const ns = terminalNode[t]
  if (ns) {
    n.status = ns
    n.endedAt = ev.time
    if (typeof d.durationMs === 'number') n.durationMs = d.durationMs
    if (d.replayed === true) n.replayed = true
    if (ns === 'completed') n.output = d.output
    if (ns === 'failed') {
      n.error = str(d.error)
      n.errorCode = str(d.code)
    }
    if (ns === 'cancelled') n.error = str(d.cause)
    if (ns === 'interrupted') {
      const iid = str(d.interruptId)
      for (let i = run.approvals.length - 1; iid && i >= 0; i--) {
        const a = run.approvals[i]
        if (a.nodeId === n.id && !a.interruptId) {
          run.approvals[i] = { ...a, interruptId: iid }
          break
        }
      }
    }
  }
}

/** The status a canvas badge shows: completed replayed nodes say "replayed". */
export function displayStatus(n: NodeView | undefined): NodeStatus | 'replayed' | undefined {
  if (!n) return undefined
  if (n.replayed && n.status === 'completed') return 'replayed'
  return n.status
}

function contentOf(v: unknown): string | undefined {
  if (typeof v === 'string') return v
  if (v && typeof v === 'object' && typeof (v as Data).content === 'string') return (v as Data).content as string
  return undefined
}

/**
 * The answer a run shows in the chat while it streams: walking the nodes
 * in start order, the last one that streamed text or completed with a
 * message (entry nodes excluded: a chat_start's output is the user's
 * message). A completed node shows its output, a running one its text.
 */
export function liveAnswer(run: RunView | undefined): string {
  if (!run) return ''
  let best: NodeView | undefined
  for (const id of run.nodeOrder) {
    const n = run.nodes[id]
    if (n.text) best = n
    else if (n.status === 'completed' && contentOf(n.output) !== undefined && !run.entryNodeIds.includes(id)) best = n
  }
  if (!best) return ''
  if (best.status === 'completed') return contentOf(best.output) ?? best.text
  return best.text
}
