import { useEffect, useMemo, useState } from 'react'
import type { Diagnostic, EdgeData, When } from '../api/types'
import { diagnosticText, fieldLabel, fieldProblem } from '../wording'
import { fields, parseInput, validate, type Field } from './schema'
import type { FlowEdge, FlowNode, TypeIndex } from './graph'

interface NodePanelProps {
  node: FlowNode
  types: TypeIndex
  diags?: Diagnostic[]
  onChange: (data: Record<string, unknown>, key: string) => void
  onDelete: () => void
  onClose: () => void
}

function display(v: unknown): string {
  if (v === undefined || v === null) return ''
  return typeof v === 'string' ? v : String(v)
}

function FieldInput({ f, value, onChange }: { f: Field; value: unknown; onChange: (v: unknown) => void }) {
  const id = `field-${f.name}`
  switch (f.kind) {
    case 'boolean': {
      const checked = value === undefined ? f.schema.default === true : value === true
      return <input id={id} name={f.name} type="checkbox" checked={checked} onChange={(e) => onChange(e.target.checked)} />
    }
    case 'enum':
      return (
        <select id={id} name={f.name} value={display(value)} onChange={(e) => onChange(parseInput(f, e.target.value))}>
          <option value="">{f.required ? '— choose —' : `(default${f.schema.default !== undefined ? `: ${String(f.schema.default)}` : ''})`}</option>
          {f.schema.enum!.map((e) => (
            <option key={String(e)} value={String(e)}>
              {String(e)}
            </option>
          ))}
        </select>
      )
    case 'longtext':
      return <textarea id={id} name={f.name} rows={4} value={display(value)} onChange={(e) => onChange(parseInput(f, e.target.value))} />
    case 'json':
      return <input id={id} name={f.name} value={value === undefined ? '' : JSON.stringify(value)} readOnly />
    default: {
      const examples = f.kind === 'text' ? f.schema.examples : undefined
      return (
        <>
          <input
            id={id}
            name={f.name}
            list={examples?.length ? `${id}-examples` : undefined}
            inputMode={f.kind === 'integer' || f.kind === 'number' ? 'decimal' : undefined}
            placeholder={f.schema.default !== undefined ? String(f.schema.default) : undefined}
            value={display(value)}
            onChange={(e) => onChange(parseInput(f, e.target.value))}
          />
          {examples?.length ? (
            <datalist id={`${id}-examples`}>
              {examples.map((e) => (
                <option key={String(e)} value={String(e)} />
              ))}
            </datalist>
          ) : null}
        </>
      )
    }
  }
}

/** Runtime options every node understands: edited as JSON, next to the type's own fields. */
function ExtraData({ data, known, onChange }: { data: Record<string, unknown>; known: Set<string>; onChange: (extra: Record<string, unknown>) => void }) {
  const extra = useMemo(() => Object.fromEntries(Object.entries(data).filter(([k]) => !known.has(k))), [data, known])
  const [text, setText] = useState(() => (Object.keys(extra).length ? JSON.stringify(extra, null, 2) : ''))
  const [err, setErr] = useState('')
  useEffect(() => {
    setText(Object.keys(extra).length ? JSON.stringify(extra, null, 2) : '')
    setErr('')
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [JSON.stringify(extra)])
  return (
    <label className="field">
      <span className="field-name">Runtime options (JSON)</span>
      <textarea
        name="extra"
        rows={3}
        placeholder='{"retry": {"maxAttempts": 3}, "timeoutMs": 30000}'
        value={text}
        onChange={(e) => {
          setText(e.target.value)
          if (e.target.value.trim() === '') {
            setErr('')
            onChange({})
            return
          }
          try {
            const v = JSON.parse(e.target.value)
            if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('must be a JSON object')
            setErr('')
            onChange(v)
          } catch (x) {
            setErr(x instanceof Error ? x.message : 'invalid JSON')
          }
        }}
      />
      <span className="field-help">retry, timeoutMs, join, effect, continueOnError</span>
      {err && <span className="field-error">{err}</span>}
    </label>
  )
}

function Diagnostics({ diags, title }: { diags?: Diagnostic[]; title?: (field: string) => string | undefined }) {
  if (!diags?.length) return null
  return (
    <ul className="props-diags" data-testid="panel-diags">
      {diags.map((d, i) => (
        <li key={i} className={`diag diag-${d.severity}`} title={[d.code, d.path].filter(Boolean).join(' ')}>
          {diagnosticText(d, title)}
        </li>
      ))}
    </ul>
  )
}

function PanelHead({ title, id, onDelete, onClose }: { title: string; id: string; onDelete: () => void; onClose: () => void }) {
  return (
    <div className="props-head">
      <b>{title}</b> <code>{id}</code>
      <button className="danger small" onClick={onDelete} title="Delete (Del)">
        Delete
      </button>
      <button className="small" onClick={onClose} title="Close (Esc)" aria-label="close panel" data-testid="close-panel">
        ✕
      </button>
    </div>
  )
}

export function NodePanel({ node, types, diags, onChange, onDelete, onClose }: NodePanelProps) {
  const t = types[node.type ?? '']
  const fs = useMemo(() => fields(t?.dataSchema), [t])
  const known = useMemo(() => new Set(fs.map((f) => f.name)), [fs])
  const errors = validate(t?.dataSchema, node.data)
  const set = (name: string, v: unknown) => {
    const next = { ...node.data }
    if (v === undefined) delete next[name]
    else next[name] = v
    onChange(next, `${node.id}.${name}`)
  }
  return (
    <div className="props" data-testid="node-panel">
      <PanelHead title={t?.label ?? node.type ?? 'Node'} id={node.id} onDelete={onDelete} onClose={onClose} />
      {!t && <div className="field-error">unknown node type {node.type}</div>}
      {t?.description && <p className="props-desc">{t.description}</p>}
      {fs.map((f) => (
        <label key={f.name} className={`field field-${f.kind}`} htmlFor={`field-${f.name}`}>
          <span className="field-name" title={f.name}>
            {fieldLabel(f.name, f.schema.title)}
            {f.required ? ' *' : ''}
          </span>
          <FieldInput f={f} value={node.data[f.name]} onChange={(v) => set(f.name, v)} />
          {f.schema.description && <span className="field-help">{f.schema.description}</span>}
          {errors[f.name] && (
            <span className="field-error" data-testid={`error-${f.name}`}>
              {fieldProblem(fieldLabel(f.name, f.schema.title), errors[f.name])}
            </span>
          )}
        </label>
      ))}
      <ExtraData
        data={node.data}
        known={known}
        onChange={(extra) => {
          const own = Object.fromEntries(Object.entries(node.data).filter(([k]) => known.has(k)))
          onChange({ ...own, ...extra }, `${node.id}.$extra`)
        }}
      />
      <Diagnostics
        // A field's own message (under the field) says it already.
        diags={diags?.filter((d) => !errors[/\.data\.([A-Za-z0-9_]+)$/.exec(d.path ?? '')?.[1] ?? ''])}
        title={(name) => fs.find((f) => f.name === name)?.schema.title}
      />
    </div>
  )
}

interface EdgePanelProps {
  edge: FlowEdge
  diags?: Diagnostic[]
  onChange: (data: FlowEdge['data'], key: string) => void
  onDelete: () => void
  onClose: () => void
}

export function EdgePanel({ edge, diags, onChange, onDelete, onClose }: EdgePanelProps) {
  const d: Partial<EdgeData> = edge.data ?? {}
  const set = (k: string, v: unknown) => {
    const next: Record<string, unknown> = { ...d }
    if (v === undefined || v === '') delete next[k]
    else next[k] = v
    onChange(next as FlowEdge['data'], `${edge.id}.${k}`)
  }
  return (
    <div className="props" data-testid="edge-panel">
      <PanelHead title="Edge" id={edge.id} onDelete={onDelete} onClose={onClose} />
      <p className="props-desc">
        {edge.source}.{edge.sourceHandle ?? '?'} → {edge.target}.{edge.targetHandle ?? '?'}
      </p>
      <label className="field">
        <span className="field-name">Channel</span>
        <span className={`channel-badge ch-${d.channel ?? 'none'}`} data-testid="edge-channel">
          {d.channel ?? 'missing'}
        </span>
        <span className="field-help">set from the ports when the edge is drawn</span>
      </label>
      {d.channel !== 'link' && (
        <>
          <label className="field" htmlFor="edge-when">
            <span className="field-name">When</span>
            <select id="edge-when" name="when" value={(d.when as When | undefined) ?? 'on_success'} onChange={(e) => set('when', e.target.value === 'on_success' ? undefined : e.target.value)}>
              <option value="on_success">on_success</option>
              <option value="on_failure">on_failure</option>
              <option value="always">always</option>
            </select>
          </label>
          <label className="field" htmlFor="edge-condition">
            <span className="field-name">Condition</span>
            <input
              id="edge-condition"
              name="condition"
              placeholder='output.content.contains("weather")'
              value={(d.condition as string | undefined) ?? ''}
              onChange={(e) => set('condition', e.target.value)}
            />
            <span className="field-help">CEL over the source node's output</span>
          </label>
        </>
      )}
      <Diagnostics diags={diags} />
    </div>
  )
}
