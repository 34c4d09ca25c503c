import { useEffect, useMemo, useState } from 'react'
import { api, call } from '../api/client'
import type { NodeState, Run } from '../api/types'
import { displayStatus, type RunView } from '../stream/reducer'
import { runStore, socket, useRun, useRuns } from '../stream/store'
import { codeText, nodeStatusText, runStatusText } from '../wording'

interface Props {
  chatId?: string
  runId?: string
  onSelectRun: (id: string | undefined) => void
  nodeId?: string
  onSelectNode: (id: string | undefined) => void
}

function time(t?: string) {
  if (!t) return ''
  const d = new Date(t)
  return Number.isNaN(d.getTime()) ? t : d.toISOString().slice(11, 23)
}

/** Milliseconds from t0 to t ("+12"), for the timeline. */
function since(t0?: string, t?: string) {
  if (!t0 || !t) return ''
  const d = new Date(t).getTime() - new Date(t0).getTime()
  return Number.isFinite(d) ? `+${d}` : ''
}

/** A status badge: words, with the raw status in the tooltip. */
function Badge({ status, node }: { status?: string; node?: boolean }) {
  if (!status) return null
  return (
    <span className={`badge st-${status}`} title={status}>
      {node ? nodeStatusText(status) : runStatusText(status)}
    </span>
  )
}

function json(v: unknown) {
  if (v === undefined) return ''
  try {
    return JSON.stringify(v, null, 2)
  } catch {
    return String(v)
  }
}

function NodeDetail({ run, nodeId, state }: { run: RunView; nodeId: string; state?: NodeState }) {
  const n = run.nodes[nodeId]
  // Inputs: the outputs of the nodes whose edges into this one were taken.
  const inputs = useMemo(() => {
    const out: { from: string; value: unknown }[] = []
    for (const ev of run.events) {
      if (ev.type !== 'edge_taken') continue
      const d = ev.data as { source?: string; target?: string } | undefined
      if (d?.target === nodeId && d.source) out.push({ from: d.source, value: run.nodes[d.source]?.output })
    }
    return out
  }, [run, nodeId])
  if (!n) return <div className="node-detail">no events for {nodeId} in this run</div>
  return (
    <div className="node-detail" data-testid="node-detail">
      <div>
        <b>{nodeId}</b> <Badge status={displayStatus(n)} node /> attempt {n.attempt}
        {n.durationMs !== undefined && <> · {n.durationMs} ms</>}
        {state?.effect && <> · effect {state.effect}</>}
      </div>
      {n.started && Object.keys(n.started).length > 0 && <pre className="json">{json(n.started)}</pre>}
      {inputs.length > 0 && (
        <>
          <h4>inputs</h4>
          {inputs.map((i, k) => (
            <pre key={k} className="json">
              {i.from}: {json(i.value)}
            </pre>
          ))}
        </>
      )}
      {(n.output !== undefined || state?.output !== undefined) && (
        <>
          <h4>output</h4>
          <pre className="json">{json(n.output ?? state?.output)}</pre>
        </>
      )}
      {n.text && n.output === undefined && (
        <>
          <h4>streamed text</h4>
          <pre className="json">{n.text}</pre>
        </>
      )}
      {(n.error || state?.error) && (
        <>
          <h4>error</h4>
          <pre className="json error" title={n.errorCode ?? state?.errorCode}>
            {n.errorCode ?? state?.errorCode ? `[${n.errorCode ?? state?.errorCode}] ${codeText(n.errorCode ?? state?.errorCode)}\n` : ''}
            {n.error ?? state?.error}
          </pre>
        </>
      )}
      {n.skipReason && <div title={n.skipReason}>Skipped: {codeText(n.skipReason)}</div>}
      {n.retries.length > 0 && (
        <>
          <h4>retries</h4>
          <ul>
            {n.retries.map((r) => (
              <li key={r.seq}>
                attempt {r.attempt} after {r.delayMs ?? 0} ms: {r.code ? <span title={codeText(r.code)}>[{r.code}] </span> : ''}
                {r.error}
              </li>
            ))}
          </ul>
        </>
      )}
      {n.toolCalls.length > 0 && (
        <>
          <h4>tool calls</h4>
          <ul>
            {n.toolCalls.map((c) => (
              <li key={c.id}>
                <code>
                  {c.name}({JSON.stringify(c.arguments)})
                </code>{' '}
                → {c.result || c.error || '…'} {c.replayed ? '(reused)' : ''} {c.approval ? (c.approval.approved ? '✔ approved' : '✘ denied') : ''}
              </li>
            ))}
          </ul>
        </>
      )}
    </div>
  )
}

export function RunInspector({ chatId, runId, onSelectRun, nodeId, onSelectNode }: Props) {
  const [runs, setRuns] = useState<Run[]>([])
  const [detail, setDetail] = useState<Run | null>(null)
  const run = useRun(runId)
  const live = useRuns()

  useEffect(() => {
    if (!chatId) {
      setRuns([])
      return
    }
    let alive = true
    const load = () =>
      call(api.GET('/api/v1/runs', { params: { query: { chatId, limit: 100 } } }))
        .then((r) => alive && setRuns(r))
        .catch(() => undefined)
    void load()
    let timer: ReturnType<typeof setTimeout> | undefined
    const off = runStore.onEvent((ev) => {
      if (ev.chatId !== chatId || (ev.type !== 'run_started' && !ev.type.startsWith('run_'))) return
      clearTimeout(timer)
      timer = setTimeout(load, 100)
    })
    return () => {
      alive = false
      off()
      clearTimeout(timer)
    }
  }, [chatId])

  // A past run: replay its log into the store.
  useEffect(() => {
    if (runId && !runStore.getState().runs[runId]) socket.follow(runId)
  }, [runId])

  const finished = run && ['completed', 'failed', 'cancelled', 'interrupted'].includes(run.status)
  // A run taken back (a cancel's rollback) is deleted once it has ended:
  // there is nothing to read of it.
  const rolledBack = run?.status === 'cancelled' && (run.error ?? '').includes('(user_rollback via ')
  useEffect(() => {
    if (!runId || rolledBack) return
    let alive = true
    call(api.GET('/api/v1/runs/{id}', { params: { path: { id: runId } } }))
      .then((r) => alive && setDetail(r))
      .catch(() => alive && setDetail(null))
    return () => {
      alive = false
    }
  }, [runId, finished, rolledBack])

  const state = detail?.nodes?.find((n) => n.id === nodeId)

  return (
    <div className="inspector" data-testid="inspector">
      <div className="insp-runs">
        <h4>runs of this chat</h4>
        {runs.length === 0 && <div className="muted">none yet</div>}
        <ul>
          {runs.map((r) => (
            <li key={r.id} className={r.id === runId ? 'sel' : ''} onClick={() => onSelectRun(r.id)} data-testid="run-item">
              <Badge status={live[r.id]?.lastSeq ? live[r.id].status : r.status} /> <code title={r.id}>{r.id.slice(0, 12)}</code>{' '}
              <span className="muted">
                {String((r.attrs as Record<string, unknown> | undefined)?.trigger ?? r.kind ?? '')} {time(r.createdAt)}
              </span>
            </li>
          ))}
        </ul>
      </div>
      <div className="insp-timeline">
        <h4>
          timeline {run ? <code>{run.runId}</code> : null} <Badge status={run?.status} />
        </h4>
        {run ? (
          <table data-testid="timeline">
            <thead>
              <tr>
                <th>seq</th>
                <th title="since the run started">+ms</th>
                <th>node</th>
                <th>type</th>
                <th title="attempt">#</th>
                <th className="ev-data">data</th>
              </tr>
            </thead>
            <tbody>
              {run.events.map((ev) => {
                const d = (ev.data ?? {}) as Record<string, unknown>
                return (
                  <tr key={ev.seq} className={`ev-${ev.type} ${ev.nodeId && ev.nodeId === nodeId ? 'sel' : ''}`} onClick={() => ev.nodeId && onSelectNode(ev.nodeId)}>
                    <td>{ev.seq}</td>
                    <td title={time(ev.time)}>{since(run.events[0]?.time, ev.time)}</td>
                    <td>{ev.nodeId ?? (d.edgeId ? `${String(d.source)}→${String(d.target)}` : '')}</td>
                    <td className="ev-type">
                      {ev.type}
                      {d.replayed === true && (
                        <span className="badge st-replayed" title="replayed">
                          reused
                        </span>
                      )}
                    </td>
                    <td>{ev.attempt ?? ''}</td>
                    <td className="ev-data" title={ev.type === 'node_delta' ? String(d.text ?? '') : d.error ? String(d.error) : undefined}>
                      {ev.type === 'node_delta' ? JSON.stringify(d.text) : d.error ? String(d.error) : ''}
                    </td>
                  </tr>
                )
              })}
            </tbody>
          </table>
        ) : (
          <div className="muted">choose a run (or send a message)</div>
        )}
      </div>
      <div className="insp-node">
        <h4>node</h4>
        {run && nodeId ? <NodeDetail run={run} nodeId={nodeId} state={state} /> : <div className="muted">click a node or an event</div>}
        {run?.error && <pre className="json error">{run.error}</pre>}
      </div>
    </div>
  )
}
