import {
  Background,
  Controls,
  MiniMap,
  Panel,
  ReactFlow,
  useReactFlow,
  type Connection,
  type EdgeTypes,
  type NodeTypes,
} from '@xyflow/react'
import { useCallback, useMemo, type DragEvent } from 'react'
import { displayStatus, type RunView } from '../stream/reducer'
import { ChannelEdge } from './ChannelEdge'
import { CanvasContext, type CanvasInfo } from './context'
import type { FlowEdge, TypeIndex } from './graph'
import { NodeCard } from './NodeCard'
import { EdgePanel, NodePanel } from './Properties'
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

interface Props {
  ed: EditorApi
  types: TypeIndex
  run?: RunView
  onNotice: (msg: string, kind?: 'error' | 'info') => void
}

export function Canvas({ ed, types, run, onNotice }: Props) {
  const rf = useReactFlow()
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

  const info: CanvasInfo = useMemo(() => ({ types, run, diags: ed.diags, extraHandles }), [types, run, ed.diags, extraHandles])

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

  const onConnect = useCallback(
    (c: Connection) => {
      const err = ed.connect(c)
      if (err) onNotice(err, 'error')
    },
    [ed, onNotice],
  )

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

  return (
    <CanvasContext.Provider value={info}>
      <div className="canvas" onDragOver={(e) => e.preventDefault()} onDrop={onDrop} data-testid="canvas">
        <ReactFlow
          nodes={ed.nodes}
          edges={edges}
          nodeTypes={nodeTypes}
          edgeTypes={edgeTypes}
          onNodesChange={ed.onNodesChange}
          onEdgesChange={ed.onEdgesChange}
          onNodeDragStart={ed.onNodeDragStart}
          onConnect={onConnect}
          isValidConnection={ed.isValidConnection}
          deleteKeyCode={['Delete', 'Backspace']}
          multiSelectionKeyCode={['Shift', 'Meta', 'Control']}
          fitView
          fitViewOptions={{ maxZoom: 1.1 }}
          minZoom={0.2}
          proOptions={{ hideAttribution: true }}
        >
          <Background gap={20} />
          <Controls showInteractive={false} />
          <MiniMap pannable zoomable nodeColor={(n) => statusColor[displayStatus(run?.nodes[n.id]) ?? 'idle']} />
          {(selNode || selEdge) && (
            <Panel position="top-right" className="props-panel">
              {selNode && (
                <NodePanel
                  key={selNode.id}
                  node={selNode}
                  types={types}
                  diags={ed.diags.nodes[selNode.id]}
                  onChange={(data, key) => ed.updateNodeData(selNode.id, data, key)}
                  onDelete={() => ed.deleteElements([selNode.id], [])}
                />
              )}
              {selEdge && (
                <EdgePanel
                  key={selEdge.id}
                  edge={selEdge}
                  diags={ed.diags.edges[selEdge.id]}
                  onChange={(data, key) => ed.updateEdgeData(selEdge.id, data, key)}
                  onDelete={() => ed.deleteElements([], [selEdge.id])}
                />
              )}
            </Panel>
          )}
          <Panel position="bottom-center" className="legend">
            <span className="legend-flow">── flow</span>
            <span className="legend-link">┄┄ link</span>
            {run && (
              <span className="legend-run" data-testid="canvas-run">
                run {run.runId.slice(0, 10)}… {run.status}
              </span>
            )}
          </Panel>
        </ReactFlow>
      </div>
    </CanvasContext.Provider>
  )
}
