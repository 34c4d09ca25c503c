import { describe, expect, it } from 'vitest'
import type { RunEvent } from '../api/types'
import { displayStatus, initialStreamState, liveAnswer, streamReducer, type StreamState } from './reducer'

// A run as the server streams it: chat_start -> agent (streams three
// words) -> chat_output.
function runLog(runId = 'r1'): RunEvent[] {
  const evs: Omit<RunEvent, 'seq' | 'runId' | 'time'>[] = [
    { type: 'run_started', data: { kind: 'stream_chat', messageId: 'm2', activeNodeIds: ['s', 'a', 'o'], entryNodeIds: ['s'] } },
    { type: 'node_started', nodeId: 's', attempt: 1 },
    { type: 'node_completed', nodeId: 's', attempt: 1, data: { output: { role: 'user', content: 'hi there' } } },
    { type: 'edge_taken', data: { edgeId: 'e1', source: 's', target: 'a' } },
    { type: 'node_started', nodeId: 'a', attempt: 1, data: { inputMode: 'chat_history', tools: [] } },
    { type: 'node_delta', nodeId: 'a', attempt: 1, data: { text: 'echo:' } },
    { type: 'node_delta', nodeId: 'a', attempt: 1, data: { text: ' hi' } },
    { type: 'node_delta', nodeId: 'a', attempt: 1, data: { text: ' there' } },
    { type: 'node_completed', nodeId: 'a', attempt: 1, data: { output: { role: 'assistant', content: 'echo: hi there' } } },
    { type: 'edge_taken', data: { edgeId: 'e2', source: 'a', target: 'o' } },
    { type: 'node_started', nodeId: 'o', attempt: 1 },
    { type: 'node_completed', nodeId: 'o', attempt: 1, data: { output: { role: 'assistant', content: 'echo: hi there' } } },
    { type: 'run_completed', data: {} },
  ]
  return evs.map((e, i) => ({ ...e, seq: i + 1, runId, chatId: 'c1', time: `2026-01-01T00:00:${String(i).padStart(2, '0')}Z` }) as RunEvent)
}

function feed(evs: RunEvent[], state: StreamState = initialStreamState): StreamState {
  return evs.reduce((s, event) => streamReducer(s, { type: 'event', event }), state)
}

// shuffle with a fixed seed so a failure reproduces
function shuffled<T>(xs: T[], seed: number): T[] {
  const out = xs.slice()
  let x = seed
  for (let i = out.length - 1; i > 0; i--) {
    x = (x * 1103515245 + 12345) % 2147483648
    const j = x % (i + 1)
    ;[out[i], out[j]] = [out[j], out[i]]
  }
  return out
}

describe('streamReducer', () => {
  it('turns a run log into node statuses, taken edges and the streamed text', () => {
    const evs = runLog()
    const mid = feed(evs.slice(0, 7)).runs.r1
    expect(mid.status).toBe('running')
    expect(mid.nodes.a.status).toBe('running')
    expect(mid.nodes.o.status).toBe('pending')
    expect(mid.nodes.s.status).toBe('completed')
    expect(mid.edgesTaken).toEqual({ e1: 4 })
    expect(liveAnswer(mid)).toBe('echo: hi')

    const r = feed(evs).runs.r1
    expect(r.status).toBe('completed')
    expect(r.messageId).toBe('m2')
    expect(Object.values(r.nodes).map((n) => n.status)).toEqual(['completed', 'completed', 'completed'])
    expect(r.edgesTaken).toEqual({ e1: 4, e2: 10 })
    expect(r.nodes.a.text).toBe('echo: hi there')
    expect(liveAnswer(r)).toBe('echo: hi there')
    expect(r.lastSeq).toBe(13)
    expect(r.events.map((e) => e.seq)).toEqual(evs.map((e) => e.seq))
  })

  it('drops duplicates delivered after a reconnect (resubscribe from an older seq)', () => {
    const evs = runLog()
    // first connection saw 1..7, the reconnect replays from 5
    const s = feed([...evs.slice(0, 7), ...evs.slice(4)])
    const r = s.runs.r1
    expect(r.nodes.a.text).toBe('echo: hi there')
    expect(r.events).toHaveLength(13)
    expect(r.duplicates).toBe(3)
  })

  it('holds early events until the gap fills (out-of-order delivery)', () => {
    const evs = runLog()
    let s = feed([...evs.slice(0, 5), evs[7], evs[6]])
    let r = s.runs.r1
    expect(r.lastSeq).toBe(5)
    expect(Object.keys(r.buffered).map(Number).sort()).toEqual([7, 8])
    expect(r.nodes.a.text).toBe('')
    s = feed([evs[5]], s)
    r = s.runs.r1
    expect(r.lastSeq).toBe(8)
    expect(r.buffered).toEqual({})
    expect(r.nodes.a.text).toBe('echo: hi there')
  })

  it('ends in the same state for any delivery order with duplicates', () => {
    const evs = runLog()
    const want = feed(evs).runs.r1
    for (let seed = 1; seed <= 50; seed++) {
      const noisy = shuffled([...evs, ...evs.filter((_, i) => i % 3 === seed % 3)], seed)
      const got = feed(noisy).runs.r1
      expect(got.nodes).toEqual(want.nodes)
      expect(got.events).toEqual(want.events)
      expect(got.edgesTaken).toEqual(want.edgesTaken)
      expect(got.status).toBe('completed')
      expect(got.buffered).toEqual({})
    }
  })

  it('does not mutate earlier states', () => {
    const evs = runLog()
    const s1 = feed(evs.slice(0, 6))
    const snapshot = JSON.stringify(s1)
    feed(evs.slice(6), s1)
    expect(JSON.stringify(s1)).toBe(snapshot)
  })

  it('keeps runs apart', () => {
    const s = feed([...runLog('r1').slice(0, 3), ...runLog('r2')])
    expect(s.runs.r1.lastSeq).toBe(3)
    expect(s.runs.r2.status).toBe('completed')
  })

  it('restarts a node text on node_retrying and records the retry', () => {
    const base = { runId: 'r', time: 't' }
    const s = feed([
      { ...base, seq: 1, type: 'run_started', data: { activeNodeIds: ['a'] } },
      { ...base, seq: 2, type: 'node_started', nodeId: 'a', attempt: 1 },
      { ...base, seq: 3, type: 'node_delta', nodeId: 'a', attempt: 1, data: { text: 'par' } },
      { ...base, seq: 4, type: 'node_retrying', nodeId: 'a', attempt: 2, data: { attempt: 2, delayMs: 10, error: 'boom', code: 'flaky' } },
      { ...base, seq: 5, type: 'node_delta', nodeId: 'a', attempt: 2, data: { text: 'full' } },
      { ...base, seq: 6, type: 'node_completed', nodeId: 'a', attempt: 2, data: { output: 'x' } },
    ] as RunEvent[])
    const a = s.runs.r.nodes.a
    expect(a.text).toBe('full')
    expect(a.attempt).toBe(2)
    expect(a.retries).toEqual([{ attempt: 2, delayMs: 10, error: 'boom', code: 'flaky', seq: 4 }])
  })

  it('tracks tool calls, approvals and the interrupt', () => {
    const base = { runId: 'r', time: 't', nodeId: 'a', attempt: 1 }
    const tc = { id: 'call_1', name: 'calculator', arguments: { expression: '6*7' }, requiresApproval: true }
    const s = feed([
      { ...base, seq: 1, type: 'run_started', nodeId: undefined, data: { activeNodeIds: ['a'] } },
      { ...base, seq: 2, type: 'node_started' },
      { ...base, seq: 3, type: 'tool_call', data: tc },
      { ...base, seq: 4, type: 'approval_required', data: { kind: 'tool_call', prompt: 'Allow?', toolCall: tc } },
      { ...base, seq: 5, type: 'node_interrupted', data: { interruptId: 'int_1', reason: 'tool_approval' } },
      { ...base, seq: 6, type: 'run_interrupted', nodeId: undefined, data: { interrupts: [{ interruptId: 'int_1', nodeId: 'a' }] } },
    ] as RunEvent[])
    const r = s.runs.r
    expect(r.status).toBe('interrupted')
    expect(r.nodes.a.status).toBe('interrupted')
    expect(r.nodes.a.toolCalls[0]).toMatchObject({ id: 'call_1', name: 'calculator', requiresApproval: true })
    expect(r.approvals).toEqual([
      { nodeId: 'a', seq: 4, kind: 'tool_call', prompt: 'Allow?', input: undefined, interruptId: 'int_1',
        toolCall: { id: 'call_1', name: 'calculator', arguments: { expression: '6*7' }, agentNodeId: undefined } },
    ])
    expect(r.interrupts).toHaveLength(1)
  })

  it('shows replayed nodes and skipped ones', () => {
    const base = { runId: 'r', time: 't' }
    const s = feed([
      { ...base, seq: 1, type: 'run_started', data: { activeNodeIds: ['s', 'a', 'b'], entryNodeIds: ['s'] } },
      { ...base, seq: 2, type: 'node_started', nodeId: 's', attempt: 1, data: { replayed: true } },
      { ...base, seq: 3, type: 'node_completed', nodeId: 's', attempt: 1, data: { replayed: true, output: { content: 'q' } } },
      { ...base, seq: 4, type: 'node_started', nodeId: 'a', attempt: 1, data: { replayed: true } },
      { ...base, seq: 5, type: 'node_completed', nodeId: 'a', attempt: 1, data: { replayed: true, output: { content: 'answer' } } },
      { ...base, seq: 6, type: 'node_skipped', nodeId: 'b', data: { reason: 'upstream_not_taken' } },
      { ...base, seq: 7, type: 'run_completed' },
    ] as RunEvent[])
    const r = s.runs.r
    expect(displayStatus(r.nodes.s)).toBe('replayed')
    expect(displayStatus(r.nodes.b)).toBe('skipped')
    expect(r.nodes.b.skipReason).toBe('upstream_not_taken')
    expect(liveAnswer(r)).toBe('answer')
  })

  it('forgets a run', () => {
    const s = streamReducer(feed(runLog()), { type: 'forget', runId: 'r1' })
    expect(s.runs).toEqual({})
  })
})
