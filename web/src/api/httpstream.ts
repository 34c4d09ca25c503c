// The fallback transport of ChatSocket when the WebSocket cannot connect
// (a proxy that strips upgrades): commands go over the HTTP routes they
// mirror, and each followed run streams over SSE (GET
// /api/v1/runs/{id}/events) from the caller's cursor, reconnecting with
// Last-Event-ID after a drop.
import { token } from './client'
import type { AckFrame, ClientFrame, RunEvent } from './types'

/** An HTTP answer that is not 2xx, as the socket's error frames carry it. */
export interface HttpFailure {
  code: string
  message: string
  details?: unknown
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  const t = token()
  return { ...(t ? { Authorization: `Bearer ${t}` } : {}), ...extra }
}

const enc = encodeURIComponent

/** The route and body a command frame maps to (undefined: not a command). */
export function route(f: ClientFrame): { path: string; body: Record<string, unknown> } | undefined {
  const pick = (keys: string[]) => {
    const out: Record<string, unknown> = {}
    for (const k of keys) {
      const v = (f as Record<string, unknown>)[k]
      if (v !== undefined) out[k] = v
    }
    return out
  }
  const chatFields = ['content', 'parentId', 'userTools', 'multitaskStrategy', 'onDisconnect', 'agentNodeId', 'resume']
  switch (f.type) {
    case 'stream_chat':
      return { path: `/api/v1/chats/${enc(f.chatId)}/messages`, body: { clientRequestId: f.id, ...pick(chatFields) } }
    case 'stream_agent_chat':
      return { path: `/api/v1/chats/${enc(f.chatId)}/agent-messages`, body: { clientRequestId: f.id, ...pick(chatFields) } }
    case 'continue_message':
    case 'retry_message':
    case 'edit_user_message': {
      const verb = { continue_message: 'continue', retry_message: 'retry', edit_user_message: 'edit' }[f.type]
      return { path: `/api/v1/chats/${enc(f.chatId)}/messages/${enc(f.messageId ?? '')}/${verb}`, body: { clientRequestId: f.id, ...pick(chatFields) } }
    }
    case 'resume':
      return { path: `/api/v1/runs/${enc(f.runId)}/resume`, body: { value: f.value } }
    case 'cancel':
      if (f.runId) return { path: `/api/v1/runs/${enc(f.runId)}/cancel`, body: {} }
      if (f.chatId) return { path: `/api/v1/chats/${enc(f.chatId)}/cancel`, body: f.clientRequestId ? { clientRequestId: f.clientRequestId } : {} }
      return undefined
  }
  return undefined
}

/** Sends a command over HTTP; resolves with the ack the WebSocket would have sent. */
export async function sendCommand(f: ClientFrame): Promise<AckFrame> {
  const r = route(f)
  if (!r) throw { code: 'invalid_json', message: `${f.type} cannot be sent over HTTP` } satisfies HttpFailure
  let res: Response
  try {
    res = await fetch(r.path, { method: 'POST', headers: headers({ 'Content-Type': 'application/json' }), body: JSON.stringify(r.body) })
  } catch (e) {
    throw { code: 'disconnected', message: e instanceof Error ? e.message : String(e) } satisfies HttpFailure
  }
  const body = (await res.json().catch(() => undefined)) as Record<string, unknown> | undefined
  if (!res.ok) {
    const err = (body?.error ?? {}) as Partial<HttpFailure>
    throw { code: err.code ?? 'internal', message: err.message ?? `HTTP ${res.status}`, details: err.details } satisfies HttpFailure
  }
  return { ...(body ?? {}), type: 'ack', id: f.id } as AckFrame
}

const terminal = new Set(['run_completed', 'run_failed', 'run_cancelled', 'run_interrupted'])

/**
 * Follows one run over SSE from after(): every event goes to onEvent
 * until the terminal one; a dropped stream reconnects (backing off) from
 * the cursor at that moment. stop() ends it.
 */
export function streamRun(runId: string, after: () => number, onEvent: (ev: RunEvent) => void, onEnd: () => void): { stop: () => void } {
  let stopped = false
  let ctrl: AbortController | undefined
  let retry = 0
  const loop = async () => {
    while (!stopped) {
      ctrl = new AbortController()
      let ended = false
      try {
        const cursor = after()
        const res = await fetch(`/api/v1/runs/${enc(runId)}/events?after=${cursor}`, {
          headers: headers({ Accept: 'text/event-stream', ...(cursor > 0 ? { 'Last-Event-ID': String(cursor) } : {}) }),
          signal: ctrl.signal,
        })
        if (res.status === 404) {
          ended = true // deleted (a rollback): nothing more will come
        } else if (res.ok && res.body) {
          retry = 0
          ended = await read(res.body, onEvent)
        }
      } catch {
        /* dropped: retry below */
      }
      if (ended || stopped) break
      await new Promise((r) => setTimeout(r, Math.min(5000, 200 * 2 ** retry++)))
    }
    if (!stopped) onEnd()
  }
  void loop()
  return {
    stop: () => {
      stopped = true
      ctrl?.abort()
    },
  }
}

/** Reads SSE frames; true when the run's terminal event came. */
async function read(body: ReadableStream<Uint8Array>, onEvent: (ev: RunEvent) => void): Promise<boolean> {
  const rd = body.getReader()
  const dec = new TextDecoder()
  let buf = ''
  for (;;) {
    const { value, done } = await rd.read()
    if (done) return false
    buf += dec.decode(value, { stream: true })
    let i: number
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const frame = buf.slice(0, i)
      buf = buf.slice(i + 2)
      const data = frame
        .split('\n')
        .filter((l) => l.startsWith('data: '))
        .map((l) => l.slice(6))
        .join('\n')
      if (!data) continue // a comment (ping)
      const ev = JSON.parse(data) as RunEvent
      onEvent(ev)
      if (terminal.has(ev.type)) {
        await rd.cancel().catch(() => undefined)
        return true
      }
    }
  }
}
