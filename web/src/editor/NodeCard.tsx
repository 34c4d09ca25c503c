import { Handle, Position, type NodeProps } from '@xyflow/react'
import { memo, useLayoutEffect, useRef } from 'react'
import { displayStatus } from '../stream/reducer'
import { codeText, diagnosticText, nodeStatusHelp, nodeStatusText } from '../wording'
import { useCanvas } from './context'
import type { FlowNode } from './graph'

function summary(data: Record<string, unknown>): string {
  for (const k of ['name', 'model', 'prompt', 'template', 'ms']) {
    const v = data[k]
    if (v !== undefined && v !== '' && v !== null) return `${k}: ${String(v)}`.slice(0, 60)
  }
  return ''
}

/** A running node's streamed text: a fixed-height box that follows the newest words, so the card never grows over its neighbours. */
function LiveText({ text }: { text: string }) {
  const ref = useRef<HTMLDivElement>(null)
  useLayoutEffect(() => {
    const el = ref.current
    if (el) el.scrollTop = el.scrollHeight
  }, [text])
  return (
    <div className="node-live nowheel" ref={ref} data-testid="node-live">
      {text}
    </div>
  )
}

/** One card for every node type: header, ports (one handle per port, named after it), status, diagnostics. */
function NodeCardImpl({ id, type, data, selected }: NodeProps<FlowNode>) {
  const { types, run, diags, extraHandles } = useCanvas()
  const t = types[type ?? '']
  const nv = run?.nodes[id]
  const st = displayStatus(nv)
  const ds = diags.nodes[id]
  const extra = extraHandles[id] ?? { in: [], out: [] }
  const ins = [
    ...(t?.ports.filter((p) => p.direction === 'in') ?? []),
    ...extra.in.map((name) => ({ name, channel: undefined, direction: 'in' as const, required: false, many: false })),
  ]
  const outs = [
    ...(t?.ports.filter((p) => p.direction === 'out') ?? []),
    ...extra.out.map((name) => ({ name, channel: undefined, direction: 'out' as const, required: false, many: false })),
  ]
  const sev = ds?.some((d) => d.severity === 'error') ? 'error' : ds ? 'warning' : ''
  const cls = ['node-card', st ? `status-${st}` : 'status-idle', sev && `diag-${sev}`, selected && 'selected', !t && 'unknown-type']
  const props = (t?.dataSchema as { properties?: Record<string, { title?: string }> } | undefined)?.properties
  const title = (f: string) => props?.[f]?.title
  return (
    <div className={cls.filter(Boolean).join(' ')} data-testid={`node-${id}`} data-status={st ?? ''} title={t?.description}>
      <div className="node-head">
        <span className="node-type">{t?.label ?? type}</span>
        <span className="node-id">{id}</span>
        {st && (
          <span className="node-status" data-testid={`status-${id}`} title={`${st}${nodeStatusHelp[st] ? `: ${nodeStatusHelp[st]}` : ''}`}>
            {nodeStatusText(st)}
            {nv && nv.attempt > 1 ? ` (try ${nv.attempt})` : ''}
          </span>
        )}
      </div>
      {summary(data) && <div className="node-summary">{summary(data)}</div>}
      <div className="ports">
        {ins.map((p) => (
          <div key={`in-${p.name}`} className={`port port-in port-${p.channel ?? 'unknown'}`}>
            <Handle type="target" position={Position.Left} id={p.name} className={`handle handle-${p.channel ?? 'unknown'}`} />
            <span className="port-name">
              {p.name}
              {p.channel === 'link' ? ' ⋯' : ''}
              {p.required ? ' *' : ''}
            </span>
          </div>
        ))}
        {outs.map((p) => (
          <div key={`out-${p.name}`} className={`port port-out port-${p.channel ?? 'unknown'}`}>
            <span className="port-name">
              {p.channel === 'link' ? '⋯ ' : ''}
              {p.name}
            </span>
            <Handle type="source" position={Position.Right} id={p.name} className={`handle handle-${p.channel ?? 'unknown'}`} />
          </div>
        ))}
      </div>
      {nv?.status === 'running' && nv.text && <LiveText text={nv.text} />}
      {nv?.status === 'failed' && (nv.error || nv.errorCode) && (
        <div className="node-error" title={nv.errorCode}>
          {nv.error || codeText(nv.errorCode)}
        </div>
      )}
      {nv?.status === 'skipped' && nv.skipReason && (
        <div className="node-note" title={nv.skipReason}>
          {codeText(nv.skipReason)}
        </div>
      )}
      {ds && (
        <ul className="node-diags" data-testid={`diag-node-${id}`}>
          {ds.map((d, i) => (
            <li key={i} className={`diag diag-${d.severity}`} title={[d.code, d.path].filter(Boolean).join(' ')}>
              {diagnosticText(d, title)}
            </li>
          ))}
        </ul>
      )}
    </div>
  )
}

export const NodeCard = memo(NodeCardImpl)
