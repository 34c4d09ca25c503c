// Graph JSON (the wire shape) <-> React Flow state, edge channels from
// port declarations, and server diagnostics -> the elements they name.
import type { Edge, Node } from '@xyflow/react'
import type { Channel, Diagnostic, EdgeData, GraphEdge, GraphInput, GraphNode, NodeType, Port } from '../api/types'

export type NodeData = Record<string, unknown>
export type FlowNode = Node<NodeData>
export type FlowEdge = Edge<Partial<EdgeData> & Record<string, unknown>>

export type TypeIndex = Record<string, NodeType>

export function indexTypes(types: NodeType[]): TypeIndex {
  return Object.fromEntries(types.map((t) => [t.type, t]))
}

export function portOf(types: TypeIndex, nodeType: string | undefined, name: string | null | undefined, dir: 'in' | 'out'): Port | undefined {
  if (!nodeType || !name) return undefined
  return types[nodeType]?.ports.find((p) => p.name === name && p.direction === dir)
}

/** The channel an edge between these ports carries, or why it cannot exist. */
export function channelFor(
  types: TypeIndex,
  source: { type?: string; handle?: string | null },
  target: { type?: string; handle?: string | null },
): { channel: Channel } | { error: string } {
  const sp = portOf(types, source.type, source.handle, 'out')
  const tp = portOf(types, target.type, target.handle, 'in')
  if (!sp) return { error: `${source.type ?? '?'} has no output port ${source.handle ?? ''}` }
  if (!tp) return { error: `${target.type ?? '?'} has no input port ${target.handle ?? ''}` }
  if (sp.channel !== tp.channel) return { error: `a ${sp.channel} output cannot connect to a ${tp.channel} port` }
  return { channel: (sp.channel ?? 'flow') as Channel }
}

export function toFlow(g: Pick<GraphInput, 'nodes' | 'edges'>): { nodes: FlowNode[]; edges: FlowEdge[] } {
  const nodes: FlowNode[] = (g.nodes ?? []).map((n) => ({
    id: String(n.id),
    type: String(n.type),
    position: { x: Number(n.position?.x ?? 0), y: Number(n.position?.y ?? 0) },
    data: (n.data && typeof n.data === 'object' ? n.data : {}) as NodeData,
  }))
  const edges: FlowEdge[] = (g.edges ?? []).map((e) => ({
    id: String(e.id),
    source: String(e.source),
    target: String(e.target),
    sourceHandle: e.sourceHandle ?? null,
    targetHandle: e.targetHandle ?? null,
    type: 'channel',
    // Kept exactly as given (a missing channel stays missing: the server
    // reports it and the edge shows the diagnostic).
    data: (e.data && typeof e.data === 'object' ? e.data : {}) as FlowEdge['data'],
  }))
  return { nodes, edges }
}

/** The wire graph of the editor's state: nothing React Flow adds, nothing patched. */
export function toGraph(nodes: FlowNode[], edges: FlowEdge[], meta: { id?: string; name?: string }): GraphInput {
  const out: GraphInput = {
    nodes: nodes.map(
      (n): GraphNode => ({
        id: n.id,
        type: n.type ?? '',
        position: { x: Math.round(n.position.x), y: Math.round(n.position.y) },
        data: n.data ?? {},
      }),
    ),
    edges: edges.map((e): GraphEdge => {
      const ge: GraphEdge = { id: e.id, source: e.source, target: e.target, data: cleanEdgeData(e.data) }
      if (e.sourceHandle) ge.sourceHandle = e.sourceHandle
      if (e.targetHandle) ge.targetHandle = e.targetHandle
      return ge
    }),
  }
  if (meta.id) out.id = meta.id
  if (meta.name !== undefined) out.name = meta.name
  return out
}

function cleanEdgeData(d: FlowEdge['data']): EdgeData {
  const out: Record<string, unknown> = { ...(d ?? {}) }
  if (out.when === 'on_success' || out.when === '') delete out.when
  if (out.condition === '') delete out.condition
  return out as EdgeData
}

/** A fresh id for a node of type t: t_1, t_2... */
export function nextNodeId(nodes: { id: string }[], t: string): string {
  const used = new Set(nodes.map((n) => n.id))
  const base = t.replace(/[^A-Za-z0-9_]/g, '_')
  for (let i = 1; ; i++) if (!used.has(`${base}_${i}`)) return `${base}_${i}`
}

export function nextEdgeId(edges: { id: string }[]): string {
  const used = new Set(edges.map((e) => e.id))
  for (let i = edges.length + 1; ; i++) if (!used.has(`e${i}`)) return `e${i}`
}

/** Default data of a node type: its schema's defaults. */
export function defaultData(t: NodeType | undefined): NodeData {
  const props = (t?.dataSchema as { properties?: Record<string, { default?: unknown }> } | undefined)?.properties ?? {}
  const out: NodeData = {}
  for (const [k, p] of Object.entries(props)) if (p.default !== undefined) out[k] = p.default
  return out
}

export interface DiagnosticMap {
  nodes: Record<string, Diagnostic[]>
  edges: Record<string, Diagnostic[]>
  /** Diagnostics that name no element of the graph. */
  graph: Diagnostic[]
}

const pathRe = /^(nodes|edges)\[(\d+)\]/

/**
 * Places each diagnostic on the element it is about: the element at the
 * index its path names in the graph that was sent, else the element with
 * its id; a cycle marks every node on it and the edges between them.
 */
export function placeDiagnostics(diags: Diagnostic[], sent: Pick<GraphInput, 'nodes' | 'edges'>): DiagnosticMap {
  const out: DiagnosticMap = { nodes: {}, edges: {}, graph: [] }
  const nodes = sent.nodes ?? []
  const edges = sent.edges ?? []
  const nodeIds = new Set(nodes.map((n) => String(n.id)))
  const edgeIds = new Set(edges.map((e) => String(e.id)))
  const add = (m: Record<string, Diagnostic[]>, id: string, d: Diagnostic) => {
    const list = (m[id] ??= [])
    if (!list.includes(d)) list.push(d)
  }
  for (const d of diags) {
    let placed = false
    const m = d.path ? pathRe.exec(d.path) : null
    if (m) {
      const el = m[1] === 'nodes' ? nodes[Number(m[2])] : edges[Number(m[2])]
      if (el && el.id !== undefined && el.id !== '') {
        add(m[1] === 'nodes' ? out.nodes : out.edges, String(el.id), d)
        placed = true
      }
    }
    if (!placed && d.id) {
      if (nodeIds.has(d.id)) {
        add(out.nodes, d.id, d)
        placed = true
      } else if (edgeIds.has(d.id)) {
        add(out.edges, d.id, d)
        placed = true
      }
    }
    if (d.nodeIds && d.nodeIds.length > 0) {
      const cyc = d.nodeIds
      for (const id of cyc) if (nodeIds.has(id)) add(out.nodes, id, d)
      for (let i = 0; i + 1 < cyc.length; i++) {
        for (const e of edges) if (e.source === cyc[i] && e.target === cyc[i + 1]) add(out.edges, String(e.id), d)
      }
      placed = true
    }
    if (!placed) out.graph.push(d)
  }
  return out
}
