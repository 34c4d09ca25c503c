import { describe, expect, it } from 'vitest'
import type { NodeType } from '../api/types'
import { channelFor, indexTypes, placeDiagnostics, toFlow, toGraph } from './graph'
import { layeredLayout, needsLayout } from './layout'
import { fields, parseInput, validate } from './schema'
import { History } from './history'
import { branch, buildTree, newestLeaf, siblings } from '../chat/tree'
import type { Message } from '../api/types'

const types = indexTypes([
  { type: 'chat_start', ports: [{ name: 'message', direction: 'out', channel: 'flow' }] },
  {
    type: 'agent',
    ports: [
      { name: 'input', direction: 'in', channel: 'flow' },
      { name: 'tools', direction: 'in', channel: 'link' },
      { name: 'output', direction: 'out', channel: 'flow' },
      { name: 'self', direction: 'out', channel: 'link' },
    ],
  },
  { type: 'tool', ports: [{ name: 'tool', direction: 'out', channel: 'link' }] },
] as NodeType[])

describe('channelFor', () => {
  it('takes the channel from the ports', () => {
    expect(channelFor(types, { type: 'chat_start', handle: 'message' }, { type: 'agent', handle: 'input' })).toEqual({ channel: 'flow' })
    expect(channelFor(types, { type: 'tool', handle: 'tool' }, { type: 'agent', handle: 'tools' })).toEqual({ channel: 'link' })
    expect(channelFor(types, { type: 'agent', handle: 'self' }, { type: 'agent', handle: 'tools' })).toEqual({ channel: 'link' })
  })
  it('refuses mixed channels and unknown ports', () => {
    expect(channelFor(types, { type: 'tool', handle: 'tool' }, { type: 'agent', handle: 'input' })).toEqual({ error: 'a link output cannot connect to a flow port' })
    expect(channelFor(types, { type: 'chat_start', handle: 'message' }, { type: 'agent', handle: 'tools' })).toEqual({ error: 'a flow output cannot connect to a link port' })
    expect(channelFor(types, { type: 'agent', handle: 'nope' }, { type: 'agent', handle: 'input' })).toHaveProperty('error')
  })
})

describe('toGraph / toFlow', () => {
  it('round-trips and never patches a missing channel', () => {
    const g = {
      nodes: [
        { id: 'a', type: 'agent', position: { x: 1.4, y: 2 }, data: { name: 'x' } },
        { id: 'b', type: 'agent', position: { x: 0, y: 0 }, data: {} },
      ],
      edges: [{ id: 'e1', source: 'a', sourceHandle: 'output', target: 'b', targetHandle: 'input', data: {} }],
    }
    const f = toFlow(g as never)
    const back = toGraph(f.nodes, f.edges, { name: 'n' })
    expect(back.edges![0].data).toEqual({})
    expect(back.nodes![0]).toEqual({ id: 'a', type: 'agent', position: { x: 1, y: 2 }, data: { name: 'x' } })
    expect(back.name).toBe('n')
  })
  it('drops the default when and empty conditions', () => {
    const f = toFlow({ nodes: [], edges: [{ id: 'e', source: 'a', target: 'b', data: { channel: 'flow', when: 'on_success', condition: '' } }] } as never)
    expect(toGraph(f.nodes, f.edges, {}).edges![0].data).toEqual({ channel: 'flow' })
  })
})

describe('placeDiagnostics', () => {
  const sent = {
    nodes: [{ id: 'n1', type: 'agent' }, { id: 'n2', type: 'agent' }, { id: 'n3', type: 'agent' }],
    edges: [
      { id: 'e1', source: 'n1', target: 'n2', data: { channel: 'flow' as const } },
      { id: 'e2', source: 'n2', target: 'n3', data: {} },
      { id: 'e3', source: 'n3', target: 'n2', data: { channel: 'flow' as const } },
    ],
  }
  it('maps paths, ids and cycles to elements', () => {
    const m = placeDiagnostics(
      [
        { severity: 'error', code: 'invalid_channel', path: 'edges[1].data.channel', message: 'bad' },
        { severity: 'error', code: 'invalid_data', path: 'nodes[0].data.temperature', message: 'too hot' },
        { severity: 'error', code: 'cycle', message: 'cycle', nodeIds: ['n2', 'n3', 'n2'] },
        { severity: 'warning', code: 'x', id: 'e1', message: 'by id' },
        { severity: 'error', code: 'y', message: 'graph-wide' },
      ],
      sent as never,
    )
    expect(Object.keys(m.edges).sort()).toEqual(['e1', 'e2', 'e3'])
    expect(m.edges.e2.map((d) => d.code)).toEqual(['invalid_channel', 'cycle'])
    expect(m.nodes.n1[0].message).toBe('too hot')
    expect(m.nodes.n2[0].code).toBe('cycle')
    expect(m.nodes.n3[0].code).toBe('cycle')
    expect(m.graph.map((d) => d.code)).toEqual(['y'])
  })
})

describe('layeredLayout', () => {
  it('puts a chain left to right and the linked tool before its agent', () => {
    const p = layeredLayout(
      [{ id: 's' }, { id: 'a' }, { id: 'o' }, { id: 't' }],
      [
        { source: 's', target: 'a' },
        { source: 'a', target: 'o' },
        { source: 't', target: 'a' },
      ],
    )
    expect(p.s.x).toBeLessThan(p.a.x)
    expect(p.a.x).toBeLessThan(p.o.x)
    expect(p.t.x).toBeLessThan(p.a.x)
    expect(p.t.y).not.toBe(p.s.y)
  })
  it('survives cycles', () => {
    const p = layeredLayout([{ id: 'a' }, { id: 'b' }], [{ source: 'a', target: 'b' }, { source: 'b', target: 'a' }])
    expect(p.a.x).not.toBe(p.b.x)
  })
  it('knows when positions are missing', () => {
    expect(needsLayout([{ position: { x: 0, y: 0 } }, { position: { x: 0, y: 0 } }, { position: { x: 0, y: 0 } }])).toBe(true)
    expect(needsLayout([{}, {}])).toBe(true)
    expect(needsLayout([{ position: { x: 0, y: 0 } }, { position: { x: 300, y: 0 } }])).toBe(false)
  })
})

describe('schema', () => {
  const schema = {
    type: 'object',
    required: ['template'],
    properties: {
      template: { type: 'string', minLength: 1 },
      temperature: { type: 'number', minimum: 0, maximum: 2 },
      maxSteps: { type: 'integer', minimum: 0 },
      name: { type: 'string', enum: ['calculator', 'current_time'] },
      on: { type: 'boolean' },
    },
  }
  it('lists fields by kind', () => {
    expect(fields(schema).map((f) => [f.name, f.kind, f.required])).toEqual([
      ['template', 'text', true],
      ['temperature', 'number', false],
      ['maxSteps', 'integer', false],
      ['name', 'enum', false],
      ['on', 'boolean', false],
    ])
  })
  it('says what is wrong', () => {
    expect(validate(schema, { temperature: 3, maxSteps: 1.5, name: 'x', on: 'yes' })).toEqual({
      template: 'required',
      temperature: 'must be at most 2',
      maxSteps: 'must be a whole number',
      name: 'must be one of "calculator", "current_time"',
      on: 'must be true or false',
    })
    expect(validate(schema, { template: 'x', temperature: 1 })).toEqual({})
  })
  it('keeps unparsable numbers as text so the message shows', () => {
    const f = fields(schema)[1]
    expect(parseInput(f, '1.5')).toBe(1.5)
    expect(parseInput(f, 'abc')).toBe('abc')
    expect(validate(schema, { template: 'x', temperature: parseInput(f, 'abc') })).toEqual({ temperature: 'must be a number' })
  })
})

describe('History', () => {
  it('undoes and redoes', () => {
    const h = new History<number>()
    h.push(1)
    h.push(2)
    expect(h.undo(3)).toBe(2)
    expect(h.undo(2)).toBe(1)
    expect(h.undo(1)).toBeUndefined()
    expect(h.redo(1)).toBe(2)
    h.push(2)
    expect(h.canRedo).toBe(false)
  })
})

describe('chat tree', () => {
  const m = (id: string, parentId: string | null, t: number): Message =>
    ({ id, parentId, role: 'user', content: id, runId: null, status: 'completed', createdAt: `2026-01-01T00:00:0${t}Z` }) as Message
  const tree = buildTree([m('u1', null, 1), m('a1', 'u1', 2), m('a2', 'u1', 3), m('u2', 'a2', 4), m('u1b', null, 5)])
  it('walks the branch and lists siblings', () => {
    expect(branch(tree, 'u2').map((x) => x.id)).toEqual(['u1', 'a2', 'u2'])
    expect(siblings(tree, tree.byId.get('a1')!).map((x) => x.id)).toEqual(['a1', 'a2'])
    expect(siblings(tree, tree.byId.get('u1')!).map((x) => x.id)).toEqual(['u1', 'u1b'])
    expect(newestLeaf(tree, tree.byId.get('u1')!).id).toBe('u2')
  })
})
