import { BaseEdge, EdgeLabelRenderer, getBezierPath, type EdgeProps } from '@xyflow/react'
import { memo } from 'react'
import { useCanvas } from './context'
import type { FlowEdge } from './graph'

/** Flow edges are solid, link edges dashed; labels show when, condition and diagnostics. */
function ChannelEdgeImpl(props: EdgeProps<FlowEdge>) {
  const { id, data, sourceX, sourceY, targetX, targetY, sourcePosition, targetPosition, markerEnd } = props
  const { run, diags } = useCanvas()
  const [path, lx, ly] = getBezierPath({ sourceX, sourceY, targetX, targetY, sourcePosition, targetPosition })
  const ds = diags.edges[id]
  const taken = run?.edgesTaken[id] !== undefined
  const parts: string[] = []
  if (data?.when && data.when !== 'on_success') parts.push(String(data.when))
  if (data?.condition) parts.push(`if ${String(data.condition)}`)
  if (!data?.channel) parts.push('no channel')
  else if (data.channel !== 'flow' && data.channel !== 'link') parts.push(`channel ${JSON.stringify(data.channel)}?`)
  return (
    <>
      <BaseEdge id={id} path={path} markerEnd={markerEnd} interactionWidth={16} />
      {taken && <path d={path} className="edge-taken-glow" />}
      {(parts.length > 0 || ds) && (
        <EdgeLabelRenderer>
          <div
            className={`edge-label nodrag nopan ${ds ? 'edge-label-diag' : ''}`}
            style={{ transform: `translate(-50%, -50%) translate(${lx}px, ${ly}px)` }}
            data-testid={`edge-label-${id}`}
          >
            {parts.join(' · ')}
            {ds?.map((d, i) => (
              <div key={i} className={`diag diag-${d.severity}`}>
                {d.message}
              </div>
            ))}
          </div>
        </EdgeLabelRenderer>
      )}
    </>
  )
}

export const ChannelEdge = memo(ChannelEdgeImpl)
