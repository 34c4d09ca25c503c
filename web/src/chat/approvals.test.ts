import { describe, expect, it } from 'vitest'
import type { RunEvent } from '../api/types'
import { initialStreamState, streamReducer } from '../stream/reducer'
import { approvalRecords, callArguments, missingParent, runChain } from './approvals'
import { chatName, titleFrom } from './names'

type Ev = Omit<RunEvent, 'seq' | 'runId' | 'time'>

function runs(logs: Record<string, Ev[]>) {
  let s = initialStreamState
  for (const [runId, evs] of Object.entries(logs)) {
    evs.forEach((e, i) => {
      s = streamReducer(s, { type: 'event', event: { ...e, seq: i + 1, runId, time: '2026-01-01T00:00:00Z' } as RunEvent })
    })
  }
  return s.runs
}

const call = { id: 'call_1', name: 'calculator', arguments: { expression: '1+1' } }

describe('approval records', () => {
  const asked: Ev[] = [
    { type: 'run_started', data: { kind: 'stream_chat' } },
    { type: 'node_started', nodeId: 'a', attempt: 1 },
    { type: 'tool_call', nodeId: 'a', attempt: 1, data: { ...call, requiresApproval: true } },
    { type: 'approval_required', nodeId: 'a', attempt: 1, data: { kind: 'tool_call', prompt: 'Allow?', toolCall: call } },
    { type: 'node_interrupted', nodeId: 'a', attempt: 1, data: { interruptId: 'i1' } },
    { type: 'run_interrupted', data: {} },
  ]
  const denied: Ev[] = [
    { type: 'run_started', data: { kind: 'continue_message', parentRunId: 'r1' } },
    { type: 'node_started', nodeId: 'a', attempt: 1 },
    // The continuing run's result carries the decision but not the arguments.
    { type: 'tool_result', nodeId: 'a', attempt: 1, data: { id: 'call_1', name: 'calculator', result: '', error: 'refused', approval: { approved: false, reason: 'not now' } } },
    { type: 'run_completed', data: {} },
  ]

  it('pairs the asking run with the decision of the run that continued it', () => {
    const rs = runs({ r1: asked, r2: denied })
    const chain = runChain('r2', rs)
    expect(chain.map((r) => r.runId)).toEqual(['r1', 'r2'])
    expect(approvalRecords(chain)).toEqual([
      { key: 'r1:4', nodeId: 'a', prompt: 'Allow?', input: undefined, call: { name: 'calculator', arguments: { expression: '1+1' } }, approved: false, reason: 'not now' },
    ])
    expect(callArguments(chain, 'call_1')).toEqual({ expression: '1+1' })
  })

  it('says which parent run is missing, and has no record without it', () => {
    const rs = runs({ r2: denied })
    expect(missingParent('r2', rs)).toBe('r1')
    expect(approvalRecords(runChain('r2', rs))).toEqual([])
    expect(missingParent('r2', runs({ r1: asked, r2: denied }))).toBeUndefined()
  })

  it('reads an approval node: completed is approved, approval_denied is denied', () => {
    const node: Ev[] = [
      { type: 'run_started', data: {} },
      { type: 'node_started', nodeId: 'gate', attempt: 1 },
      { type: 'approval_required', nodeId: 'gate', attempt: 1, data: { kind: 'node', prompt: 'Go on?', input: { content: 'x' } } },
      { type: 'node_interrupted', nodeId: 'gate', attempt: 1, data: { interruptId: 'i1' } },
      { type: 'run_interrupted', data: {} },
    ]
    const yes: Ev[] = [
      { type: 'run_started', data: { parentRunId: 'n1' } },
      { type: 'node_started', nodeId: 'gate', attempt: 1 },
      { type: 'node_completed', nodeId: 'gate', attempt: 1, data: { output: {} } },
    ]
    const no: Ev[] = [
      { type: 'run_started', data: { parentRunId: 'n1' } },
      { type: 'node_started', nodeId: 'gate', attempt: 1 },
      { type: 'node_failed', nodeId: 'gate', attempt: 1, data: { error: 'approval_denied: gate: rejected: too late: sorry', code: 'approval_denied' } },
    ]
    // No reason given: the server's error ends at "rejected".
    const bare: Ev[] = no.map((e) => (e.type === 'node_failed' ? { ...e, data: { error: 'approval_denied: gate: rejected', code: 'approval_denied' } } : e))
    expect(approvalRecords(runChain('y', runs({ n1: node, y: yes })))[0]).toMatchObject({ prompt: 'Go on?', approved: true })
    expect(approvalRecords(runChain('n', runs({ n1: node, n: no })))[0]).toMatchObject({ approved: false, reason: 'too late: sorry' })
    const none = approvalRecords(runChain('n', runs({ n1: node, n: bare })))[0]
    expect(none).toMatchObject({ approved: false })
    expect(none.reason).toBeUndefined()
  })
})

describe('chat names', () => {
  it('prefers an edit, then the title, then the first message, then the time', () => {
    const c = { id: 'c1', title: 'From the server', createdAt: '2026-01-01T10:00:00Z' }
    expect(chatName(c, { c1: 'Mine' })).toBe('Mine')
    expect(chatName(c, {})).toBe('From the server')
    expect(chatName({ id: 'c1' }, {}, 'first   words\nof it')).toBe('first words of it')
    expect(chatName({ id: 'c1', createdAt: c.createdAt }, {})).toMatch(/^Chat of /)
    expect(titleFrom('x'.repeat(80))).toHaveLength(60)
  })
})
