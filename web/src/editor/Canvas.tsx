import {
  Background,
  Controls,
  MiniMap,
  Panel,
  ReactFlow,
  useReactFlow,
  type Connection,
  type EdgeTypes,
  type FinalConnectionState,
  type NodeTypes,
  type ReactFlowInstance,
} from '@xyflow/react'
import { useCallback, useEffect, useMemo, useRef, useState, type DragEvent } from 'react'
import { displayStatus, type RunView } from '../stream/reducer'
import type { Theme } from '../theme'
import { runStatusText } from '../wording'
import { ChannelEdge } from './ChannelEdge'
import { CanvasContext, type CanvasInfo } from './context'
import type { FlowEdge, FlowNode, TypeIndex } from './graph'
import { LabelLayout } from './labels'
import { NodeCard } from './NodeCard'
import { defaultNodeSize, freeSpot, type Rect } from './placement'
import { EdgePanel, NodePanel } from './Properties'
import { SidePanel } from './SidePanel'
import { templates, type Template } from './templates'
import type { EditorApi } from './useEditor'

const statusColor: Record<string, string> = {
  idle: '#cbd5e1',
  pending: '#e5e7eb',
  running: '#2563eb',
  completed: '#16a34a',
  replayed: '#0d9488',
  failed: '#dc2626',
  skipped: '#9ca3af',
  cancelled: '#d97706',
  interrupted: '#c026d3',
}

export const DND_TYPE = 'application/x-chatgraph-node-type'
const edgeTypes: EdgeTypes = { channel: ChannelEdge }

/**
 * What the overlays on the canvas take (px): the controls (bottom left),
 * the legend (bottom centre) and the minimap (bottom right) share a band
 * at the bottom. Fitting the view and placing new nodes keep out of it.
 */
export const overlayInsets = { top: 24, right: 24, bottom: 130, left: 24 }
const fitOptions = {
  padding: {
    top: `${overlayInsets.top}px`,
    right: `${overlayInsets.right}px`,
    bottom: `${overlayInsets.bottom}px`,
    left: `${overlayInsets.left}px`,
  },
  maxZoom: 1,
  minZoom: 0.2,
} as const

/** The part of the flow a person sees past the overlays, in flow coordinates. */
function visibleFlowRect(rf: ReactFlowInstance<FlowNode, FlowEdge>, el: Element | null): Rect | undefined {
  const r = el?.getBoundingClientRect()
  if (!r || r.width === 0) return undefined
  const a = rf.screenToFlowPosition({ x: r.left + overlayInsets.left, y: r.top + overlayInsets.top })
  const b = rf.screenToFlowPosition({ x: r.right - overlayInsets.right, y: r.bottom - overlayInsets.bottom })
  return { x: a.x, y: a.y, w: Math.max(1, b.x - a.x), h: Math.max(1, b.y - a.y) }
}

/**
 * Where a node added by a palette click goes: free space in view, first
 * to the right of the selected node (the one added last, usually: so a
 * chain added in order reads left to right) or below it, else near the
 * middle of the view; the first node of a graph goes left of the middle.
 */
export function placeNew(rf: ReactFlowInstance<FlowNode, FlowEdge>, nodes: FlowNode[]): { x: number; y: number } {
  const view = visibleFlowRect(rf, document.querySelector('[data-testid="canvas"]')) ?? { x: 0, y: 0, w: 800, h: 500 }
  const rect = (n: FlowNode) => ({
    x: n.position.x,
    y: n.position.y,
    w: n.measured?.width ?? defaultNodeSize.w,
    h: n.measured?.height ?? defaultNodeSize.h,
  })
  const taken = nodes.map(rect)
  const sel = nodes.filter((n) => n.selected)
  let from: { x: number; y: number } | undefined
  const fits = (p: { x: number; y: number }) => p.x + defaultNodeSize.w <= view.x + view.w && p.y + defaultNodeSize.h <= view.y + view.h
  if (nodes.length === 0) from = { x: view.x + view.w * 0.2 - defaultNodeSize.w / 2, y: view.y + view.h * 0.4 - defaultNodeSize.h / 2 }
  else if (sel.length === 1) {
    const r = rect(sel[0])
    from = [
      { x: r.x + r.w + 80, y: r.y },
      { x: r.x, y: r.y + r.h + 60 },
    ].find(fits)
  }
  return freeSpot(view, taken, defaultNodeSize, 30, from)
}

interface Refusal {
  text: string
  x: number
  y: number
  at: number
}

interface Props {
  ed: EditorApi
  types: TypeIndex
  run?: RunView
  theme: Theme
  /** Bumped to ask for a zoom-to-fit once the nodes are measured (after a load). */
  fitRequest: number
  onTemplate: (t: Template) => void
}

export function Canvas({ ed, types, run, theme, fitRequest, onTemplate }: Props) {
  const rf = useReactFlow<FlowNode, FlowEdge>()
  const wrap = useRef<HTMLDivElement>(null)
  const labels = useMemo(() => new LabelLayout(), [])
  const [refusal, setRefusal] = useState<Refusal | null>(null)
  const pendingRefusal = useRef<string | undefined>(undefined)

  // One card component for every type, known or not.
  const nodeTypes: NodeTypes = useMemo(() => {
    const m: NodeTypes = { default: NodeCard }
    for (const t of Object.keys(types)) m[t] = NodeCard
    for (const n of ed.nodes) if (n.type) m[n.type] = NodeCard
    return m
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [types, ed.nodes.map((n) => n.type).join(',')])

  const extraHandles = useMemo(() => {
    const out: CanvasInfo['extraHandles'] = {}
    const byId = new Map(ed.nodes.map((n) => [n.id, n]))
    const need = (nodeId: string, handle: string | null | undefined, dir: 'in' | 'out') => {
      if (!handle) return
      const n = byId.get(nodeId)
      if (!n) return
      const declared = types[n.type ?? '']?.ports.some((p) => p.name === handle && p.direction === dir)
      if (declared) return
      const e = (out[nodeId] ??= { in: [], out: [] })
      if (!e[dir].includes(handle)) e[dir].push(handle)
    }
    for (const e of ed.edges) {
      need(e.source, e.sourceHandle, 'out')
      need(e.target, e.targetHandle, 'in')
    }
    return out
  }, [ed.nodes, ed.edges, types])

  const info: CanvasInfo = useMemo(() => ({ types, run, diags: ed.diags, extraHandles, labels }), [types, run, ed.diags, extraHandles, labels])

  const edges = useMemo(
    () =>
      ed.edges.map((e): FlowEdge => {
        const ch = e.data?.channel === 'flow' || e.data?.channel === 'link' ? e.data.channel : 'none'
        const cls = [`ch-${ch}`]
        if (run?.edgesTaken[e.id] !== undefined) cls.push('taken')
        const ds = ed.diags.edges[e.id]
        if (ds) cls.push(ds.some((d) => d.severity === 'error') ? 'diag-error' : 'diag-warning')
        if (e.data?.when && e.data.when !== 'on_success') cls.push(`when-${e.data.when}`)
        return { ...e, type: 'channel', className: cls.join(' ') }
      }),
    [ed.edges, ed.diags, run],
  )

  // Zoom to fit once the nodes of a load are measured (React Flow's
  // dimension changes reach ed.nodes), leaving the overlays' band free.
  const fitted = useRef(0)
  useEffect(() => {
    if (fitRequest === fitted.current) return
    if (ed.nodes.some((n) => !n.measured?.width)) return
    fitted.current = fitRequest
    if (ed.nodes.length) void rf.fitView(fitOptions)
  }, [fitRequest, rf, ed.nodes])

  const onConnect = useCallback(
    (c: Connection) => {
      pendingRefusal.current = ed.connect(c)
    },
    [ed],
  )

  // A connection that was refused says why, where the pointer let go.
  const onConnectEnd = useCallback(
    (event: MouseEvent | TouchEvent, st: FinalConnectionState) => {
      let text = pendingRefusal.current
      pendingRefusal.current = undefined
      if (!text && !st.isValid && st.fromHandle && st.toHandle) {
        text = ed.refusal(
          { nodeId: st.fromHandle.nodeId, id: st.fromHandle.id, type: st.fromHandle.type },
          { nodeId: st.toHandle.nodeId, id: st.toHandle.id, type: st.toHandle.type },
        )
      }
      if (!text) return
      const p = 'changedTouches' in event ? event.changedTouches[0] : event
      const r = wrap.current?.getBoundingClientRect()
      setRefusal({ text, x: p.clientX - (r?.left ?? 0), y: p.clientY - (r?.top ?? 0), at: Date.now() })
    },
    [ed],
  )

  useEffect(() => {
    if (!refusal) return
    const t = setTimeout(() => setRefusal((r) => (r === refusal ? null : r)), 5000)
    return () => clearTimeout(t)
  }, [refusal])

  const onDrop = useCallback(
    (e: DragEvent) => {
      const t = e.dataTransfer.getData(DND_TYPE)
      if (!t) return
      e.preventDefault()
      ed.addNode(t, rf.screenToFlowPosition({ x: e.clientX, y: e.clientY }))
    },
    [ed, rf],
  )

  const selNodes = ed.nodes.filter((n) => n.selected)
  const selEdges = ed.edges.filter((e) => e.selected)
  const selNode = selNodes.length === 1 && selEdges.length === 0 ? selNodes[0] : undefined
  const selEdge = selEdges.length === 1 && selNodes.length === 0 ? selEdges[0] : undefined
  const empty = ed.nodes.length === 0

  return (
    <CanvasContext.Provider value={info}>
      <div className="workspace">
        <div
          className="canvas"
          ref={wrap}
          onDragOver={(e) => e.preventDefault()}
          onDrop={onDrop}
          onPointerDown={() => refusal && setRefusal(null)}
          data-testid="canvas"
        >
          <ReactFlow
            nodes={ed.nodes}
            edges={edges}
            nodeTypes={nodeTypes}
            edgeTypes={edgeTypes}
            onNodesChange={ed.onNodesChange}
            onEdgesChange={ed.onEdgesChange}
            onNodeDragStart={ed.onNodeDragStart}
            onConnect={onConnect}
            onConnectEnd={onConnectEnd}
            isValidConnection={ed.isValidConnection}
            deleteKeyCode={['Delete', 'Backspace']}
            multiSelectionKeyCode={['Shift', 'Meta', 'Control']}
            defaultViewport={{ x: 40, y: 40, zoom: 1 }}
            minZoom={0.2}
            colorMode={theme}
            proOptions={{ hideAttribution: true }}
          >
            <Background gap={20} />
            <Controls showInteractive={false} orientation="horizontal" fitViewOptions={fitOptions} />
            {!empty && (
              <MiniMap
                pannable
                zoomable
                style={{ width: 160, height: 100 }}
                nodeColor={(n) => statusColor[displayStatus(run?.nodes[n.id]) ?? 'idle']}
              />
            )}
            <Panel position="bottom-center" className="legend">
              <span className="legend-flow">── flow</span>
              <span className="legend-link">┄┄ link</span>
              {run && (
                <span className="legend-run" data-testid="canvas-run" title={`run ${run.runId}: ${run.status}`}>
                  last run: {runStatusText(run.status)}
                </span>
              )}
            </Panel>
          </ReactFlow>
          {empty && (
            <div className="empty-canvas" data-testid="empty-canvas">
              <h3>Start with a graph</h3>
              <p>Pick a starter, or drag a node from the palette on the left: a graph begins with Chat start and ends with Chat output.</p>
              <div className="starter-list">
                {templates.map((t) => (
                  <button key={t.id} className="starter" onClick={() => onTemplate(t)} data-testid={`starter-${t.id}`}>
                    <b>{t.name}</b>
                    <span>{t.description}</span>
                  </button>
                ))}
              </div>
              <p className="muted">
                Press <kbd>?</kbd> for keyboard shortcuts.
              </p>
            </div>
          )}
          {refusal && (
            <div className="connect-refusal" role="alert" data-testid="connect-refusal" style={{ left: refusal.x, top: refusal.y }}>
              {refusal.text}
            </div>
          )}
        </div>
        {(selNode || selEdge) && (
          <SidePanel>
            {selNode && (
              <NodePanel
                key={selNode.id}
                node={selNode}
                types={types}
                diags={ed.diags.nodes[selNode.id]}
                onChange={(data, key) => ed.updateNodeData(selNode.id, data, key)}
                onDelete={() => ed.deleteElements([selNode.id], [])}
                onClose={ed.clearSelection}
              />
            )}
            {selEdge && (
              <EdgePanel
                key={selEdge.id}
                edge={selEdge}
                diags={ed.diags.edges[selEdge.id]}
                onChange={(data, key) => ed.updateEdgeData(selEdge.id, data, key)}
                onDelete={() => ed.deleteElements([], [selEdge.id])}
                onClose={ed.clearSelection}
              />
            )}
          </SidePanel>
        )}
      </div>
    </CanvasContext.Provider>
  )
}
