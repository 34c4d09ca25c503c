import { BaseEdge, EdgeLabelRenderer, getBezierPath, type EdgeProps } from '@xyflow/react'
import { memo, useLayoutEffect, useRef } from 'react'
import { diagnosticText } from '../wording'
import { useCanvas } from './context'
import type { FlowEdge } from './graph'
import { useLabelPlace } from './labels'

/**
 * Flow edges are solid, link edges dashed; labels show when, condition and
 * diagnostics. A label sits at the middle of its edge unless another label
 * is there already (LabelLayout), then just below it, tied to the edge by
 * a thin line.
 */
function ChannelEdgeImpl(props: EdgeProps<FlowEdge>) {
  const { id, data, sourceX, sourceY, targetX, targetY, sourcePosition, targetPosition, markerEnd } = props
  const { run, diags, labels } = useCanvas()
  const [path, lx, ly] = getBezierPath({ sourceX, sourceY, targetX, targetY, sourcePosition, targetPosition })
  const ds = diags.edges[id]
  const taken = run?.edgesTaken[id] !== undefined
  const parts: string[] = []
  if (data?.when && data.when !== 'on_success') parts.push(String(data.when))
  if (data?.condition) parts.push(`if ${String(data.condition)}`)
  if (!data?.channel) parts.push('no channel')
  else if (data.channel !== 'flow' && data.channel !== 'link') parts.push(`channel ${JSON.stringify(data.channel)}?`)
  const hasLabel = parts.length > 0 || !!ds
  const ref = useRef<HTMLDivElement>(null)
  const place = useLabelPlace(labels, id)

  useLayoutEffect(() => {
    const el = ref.current
    labels.report(id, el ? { x: lx, y: ly, w: el.offsetWidth, h: el.offsetHeight } : undefined)
  })
  useLayoutEffect(() => () => labels.report(id, undefined), [id, labels])

  const px = place?.x ?? lx
  const py = place?.y ?? ly
  const moved = Math.abs(px - lx) > 1 || Math.abs(py - ly) > 1
  return (
    <>
      <BaseEdge id={id} path={path} markerEnd={markerEnd} interactionWidth={16} />
      {taken && <path d={path} className="edge-taken-glow" />}
      {hasLabel && moved && <line x1={lx} y1={ly} x2={px} y2={py} className="edge-label-leader" />}
      {hasLabel && (
        <EdgeLabelRenderer>
          <div
            ref={ref}
            className={`edge-label nodrag nopan ${ds ? 'edge-label-diag' : ''}`}
            style={{ transform: `translate(-50%, -50%) translate(${px}px, ${py}px)` }}
            data-testid={`edge-label-${id}`}
          >
            {parts.join(' · ')}
            {ds?.map((d, i) => (
              <div key={i} className={`diag diag-${d.severity}`} title={[d.code, d.path].filter(Boolean).join(' ')}>
                {diagnosticText(d)}
              </div>
            ))}
          </div>
        </EdgeLabelRenderer>
      )}
    </>
  )
}

export const ChannelEdge = memo(ChannelEdgeImpl)
