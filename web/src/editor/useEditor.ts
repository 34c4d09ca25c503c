// The editor's document: nodes and edges (React Flow state, the wire
// shape underneath), the graph's id/name, undo/redo and the diagnostics
// of the last save or validation.
import { applyEdgeChanges, applyNodeChanges, type Connection, type EdgeChange, type NodeChange } from '@xyflow/react'
import { useCallback, useMemo, useRef, useState } from 'react'
import type { GraphInput, SavedGraph } from '../api/types'
import {
  channelFor,
  defaultData,
  nextEdgeId,
  nextNodeId,
  placeDiagnostics,
  toFlow,
  toGraph,
  type DiagnosticMap,
  type FlowEdge,
  type FlowNode,
  type TypeIndex,
} from './graph'
import { History } from './history'
import { layeredLayout, needsLayout } from './layout'

export interface HandleRef {
  nodeId: string
  id?: string | null
  type: 'source' | 'target'
}

export interface GraphMeta {
  id?: string
  name: string
  planVersion?: number
}

interface Doc {
  nodes: FlowNode[]
  edges: FlowEdge[]
}

const noDiags: DiagnosticMap = { nodes: {}, edges: {}, graph: [] }

function strip(d: Doc): Doc {
  // selection is view state, not document state: keep it out of history
  return {
    nodes: d.nodes.map((n) => (n.selected ? { ...n, selected: false } : n)),
    edges: d.edges.map((e) => (e.selected ? { ...e, selected: false } : e)),
  }
}

export function layoutDoc(doc: Doc): Doc {
  const pos = layeredLayout(doc.nodes, doc.edges)
  return { ...doc, nodes: doc.nodes.map((n) => ({ ...n, position: pos[n.id] ?? n.position })) }
}

export function useEditor(types: TypeIndex) {
  const [doc, setDoc] = useState<Doc>({ nodes: [], edges: [] })
  const [meta, setMeta] = useState<GraphMeta>({ name: 'Untitled graph' })
  const [dirty, setDirty] = useState(false)
  const [diags, setDiagsState] = useState<DiagnosticMap>(noDiags)
  // Set once a save or Validate has checked this document: from then on
  // every edit is checked again (App), so what the canvas shows is never stale.
  const [checked, setChecked] = useState(false)
  const history = useRef(new History<Doc>())
  const [ver, bump] = useState(0)
  const docRef = useRef(doc)
  docRef.current = doc
  const lastKey = useRef<{ key: string; at: number } | null>(null)
  const pushedThisTick = useRef(false)

  const record = useCallback((key?: string) => {
    // Typing in one field is one undo step; so is one deletion that
    // removes nodes and then their edges in two change batches.
    const now = Date.now()
    if (key && lastKey.current && lastKey.current.key === key && now - lastKey.current.at < 1500) {
      lastKey.current.at = now
      return
    }
    lastKey.current = key ? { key, at: now } : null
    if (pushedThisTick.current) return
    pushedThisTick.current = true
    queueMicrotask(() => (pushedThisTick.current = false))
    history.current.push(strip(docRef.current))
    bump((x) => x + 1)
  }, [])

  const change = useCallback((next: Doc | ((d: Doc) => Doc), key?: string) => {
    record(key)
    setDoc(next)
    setDirty(true)
  }, [record])

  const onNodesChange = useCallback(
    (changes: NodeChange<FlowNode>[]) => {
      const structural = changes.some((c) => c.type === 'remove' || c.type === 'add')
      if (structural) {
        record()
        setDirty(true)
      }
      if (changes.some((c) => c.type === 'position' && c.dragging === false)) setDirty(true)
      setDoc((d) => ({ ...d, nodes: applyNodeChanges(changes, d.nodes) }))
    },
    [record],
  )

  const onEdgesChange = useCallback(
    (changes: EdgeChange<FlowEdge>[]) => {
      if (changes.some((c) => c.type === 'remove' || c.type === 'add')) {
        record()
        setDirty(true)
      }
      setDoc((d) => ({ ...d, edges: applyEdgeChanges(changes, d.edges) }))
    },
    [record],
  )

  const onNodeDragStart = useCallback(() => record(), [record])

  const connectionCheck = useCallback(
    (c: Connection | FlowEdge) => {
      const nodes = docRef.current.nodes
      const s = nodes.find((n) => n.id === c.source)
      const t = nodes.find((n) => n.id === c.target)
      if (!s || !t) return { error: 'unknown node' } as const
      if (s.id === t.id) return { error: 'a node cannot connect to itself' } as const
      return channelFor(types, { type: s.type, handle: c.sourceHandle }, { type: t.type, handle: c.targetHandle })
    },
    [types],
  )

  const isValidConnection = useCallback((c: Connection | FlowEdge) => 'channel' in connectionCheck(c), [connectionCheck])

  /**
   * Why a connection drawn from one handle to another is refused (for the
   * message at the pointer), or undefined when it is allowed. Handles are
   * React Flow's: type "source" is an output, "target" an input.
   */
  const refusal = useCallback(
    (from: HandleRef, to: HandleRef): string | undefined => {
      if (from.type === to.type) return from.type === 'target' ? 'an input cannot connect to another input' : 'an output cannot connect to another output'
      const [s, t] = from.type === 'source' ? [from, to] : [to, from]
      const r = connectionCheck({ source: s.nodeId, sourceHandle: s.id ?? null, target: t.nodeId, targetHandle: t.id ?? null })
      return 'error' in r ? r.error : undefined
    },
    [connectionCheck],
  )

  /** Draws an edge; its channel comes from the ports. Returns an error to show, if any. */
  const connect = useCallback(
    (c: Connection): string | undefined => {
      const r = connectionCheck(c)
      if ('error' in r) return r.error
      const dup = docRef.current.edges.some(
        (e) => e.source === c.source && e.target === c.target && e.sourceHandle === c.sourceHandle && e.targetHandle === c.targetHandle,
      )
      if (dup) return 'these ports are already connected'
      change((d) => ({
        ...d,
        edges: [
          ...d.edges,
          {
            id: nextEdgeId(d.edges),
            source: c.source,
            target: c.target,
            sourceHandle: c.sourceHandle,
            targetHandle: c.targetHandle,
            type: 'channel',
            data: { channel: r.channel },
          },
        ],
      }))
      return undefined
    },
    [connectionCheck, change],
  )

  const addNode = useCallback(
    (type: string, position: { x: number; y: number }) => {
      const id = nextNodeId(docRef.current.nodes, type)
      change((d) => ({
        ...d,
        nodes: [...d.nodes.map((n) => (n.selected ? { ...n, selected: false } : n)), { id, type, position, data: defaultData(types[type]), selected: true }],
      }))
      return id
    },
    [change, types],
  )

  const updateNodeData = useCallback(
    (id: string, data: Record<string, unknown>, key: string) =>
      change((d) => ({ ...d, nodes: d.nodes.map((n) => (n.id === id ? { ...n, data } : n)) }), key),
    [change],
  )

  const updateEdgeData = useCallback(
    (id: string, data: FlowEdge['data'], key: string) =>
      change((d) => ({ ...d, edges: d.edges.map((e) => (e.id === id ? { ...e, data } : e)) }), key),
    [change],
  )

  const deleteElements = useCallback(
    (nodeIds: string[], edgeIds: string[]) => {
      const ns = new Set(nodeIds)
      const es = new Set(edgeIds)
      change((d) => ({
        nodes: d.nodes.filter((n) => !ns.has(n.id)),
        edges: d.edges.filter((e) => !es.has(e.id) && !ns.has(e.source) && !ns.has(e.target)),
      }))
    },
    [change],
  )

  const undo = useCallback(() => {
    const prev = history.current.undo(strip(docRef.current))
    if (prev) {
      setDoc(prev)
      setDirty(true)
      lastKey.current = null
      bump((x) => x + 1)
    }
  }, [])

  const redo = useCallback(() => {
    const next = history.current.redo(strip(docRef.current))
    if (next) {
      setDoc(next)
      setDirty(true)
      lastKey.current = null
      bump((x) => x + 1)
    }
  }, [])

  const layout = useCallback(() => change((d) => layoutDoc(d)), [change])

  /** Unselects everything (closes the side panel); not an undo step. */
  const clearSelection = useCallback(() => {
    setDoc((d) =>
      d.nodes.some((n) => n.selected) || d.edges.some((e) => e.selected)
        ? {
            nodes: d.nodes.map((n) => (n.selected ? { ...n, selected: false } : n)),
            edges: d.edges.map((e) => (e.selected ? { ...e, selected: false } : e)),
          }
        : d,
    )
  }, [])

  /** Replaces the document (a load or an import); auto-layout when positions are missing. */
  const replace = useCallback((g: Pick<GraphInput, 'nodes' | 'edges'>, m: GraphMeta, opts: { dirty: boolean }) => {
    let next: Doc = toFlow(g)
    if (needsLayout(g.nodes ?? [])) next = layoutDoc(next)
    history.current.clear()
    lastKey.current = null
    setDoc(next)
    setMeta(m)
    setDirty(opts.dirty)
    setDiagsState(noDiags)
    setChecked(false)
    bump((x) => x + 1)
  }, [])

  const load = useCallback((g: SavedGraph) => replace(g, { id: g.id, name: g.name ?? g.id ?? '', planVersion: g.planVersion }, { dirty: false }), [replace])

  const wire = useCallback((): GraphInput => toGraph(docRef.current.nodes, docRef.current.edges, { id: meta.id, name: meta.name }), [meta])

  const setDiagnostics = useCallback((list: Parameters<typeof placeDiagnostics>[0], sent: GraphInput) => {
    setDiagsState(list.length ? placeDiagnostics(list, sent) : noDiags)
    setChecked(true)
  }, [])

  const saved = useCallback((g: SavedGraph) => {
    setMeta({ id: g.id, name: g.name ?? g.id ?? '', planVersion: g.planVersion })
    setDirty(false)
  }, [])

  return useMemo(
    () => ({
      nodes: doc.nodes,
      edges: doc.edges,
      meta,
      setMeta,
      dirty,
      setDirty,
      diags,
      checked,
      setDiagnostics,
      onNodesChange,
      onEdgesChange,
      onNodeDragStart,
      isValidConnection,
      refusal,
      clearSelection,
      connect,
      addNode,
      updateNodeData,
      updateEdgeData,
      deleteElements,
      undo,
      redo,
      canUndo: history.current.canUndo,
      canRedo: history.current.canRedo,
      layout,
      replace,
      load,
      wire,
      saved,
    }),
    [doc, ver, meta, dirty, diags, checked, setDiagnostics, onNodesChange, onEdgesChange, onNodeDragStart, isValidConnection, refusal, clearSelection, connect, addNode, updateNodeData, updateEdgeData, deleteElements, undo, redo, layout, replace, load, wire, saved],
  )
}

export type EditorApi = ReturnType<typeof useEditor>
