// One WebSocket (subprotocol chatgraph.v1) for every command and event
// stream of the page. It reconnects on its own and then resubscribes to
// every run it follows from that run's last applied seq (asked from the
// caller, normally the stream reducer), so a dropped connection loses and
// duplicates nothing; the reducer drops any overlap anyway.
//
// When the WebSocket cannot connect at all (a proxy that strips upgrades:
// fallbackAfter failed attempts and never an open connection), the socket
// falls back to HTTP for good: commands go over the routes they mirror and
// every followed run streams over SSE from the same cursor (httpstream.ts).
import { token } from './client'
import { sendCommand, streamRun, type HttpFailure } from './httpstream'
import type { AckFrame, ClientFrame, ErrorFrame, RunEvent, ServerFrame } from './types'

export type SocketStatus = 'connecting' | 'open' | 'closed'

export interface SocketOptions {
  url?: string
  onEvent: (ev: RunEvent) => void
  /** The last seq applied for runId (0: none). */
  cursor: (runId: string) => number
  onStatus?: (s: SocketStatus) => void
  /** Called after a reconnect, once the resubscriptions are sent. */
  onReconnect?: () => void
  /** Failed WebSocket attempts (never opened) before falling back to HTTP + SSE (default 2). */
  fallbackAfter?: number
}

/** A command the server refused (an error frame), or a lost connection. */
export class SocketError extends Error {
  readonly code: string
  readonly details: unknown
  constructor(code: string, message: string, details?: unknown) {
    super(message)
    this.code = code
    this.details = details
  }
}

interface Waiter {
  resolve: (a: AckFrame) => void
  reject: (e: Error) => void
}

const terminal = new Set(['run_completed', 'run_failed', 'run_cancelled', 'run_interrupted'])

/**
 * The largest frame the UI sends. The server reads frames up to its body
 * limit (`--body-limit`, 1 MiB by default) and closes the connection on a
 * bigger one (1009, docs/api.md), losing the command; the UI keeps under
 * any limit a deployment may set. Chat calls take content up to 200,000
 * characters, so a long message goes over the HTTP route its frame
 * mirrors instead (refused there with a clear 413 if it is too big), and
 * its run is followed over the WebSocket.
 */
export const maxFrameBytes = 64 << 10

/** Is frame f too big for the WebSocket (its JSON in UTF-8 over maxFrameBytes)? */
export function frameTooBig(f: ClientFrame): boolean {
  const s = JSON.stringify(f)
  // Cheap bounds first: UTF-8 takes 1 to 3 bytes per UTF-16 code unit.
  if (s.length * 3 <= maxFrameBytes) return false
  if (s.length > maxFrameBytes) return true
  return new TextEncoder().encode(s).length > maxFrameBytes
}

let counter = 0
/** A client request id: unique per page, printable. */
export function newRequestId(prefix = 'cr'): string {
  counter++
  const rnd = Math.random().toString(36).slice(2, 10)
  return `${prefix}_${Date.now().toString(36)}${counter.toString(36)}${rnd}`
}

export class ChatSocket {
  private ws?: WebSocket
  private opts: SocketOptions
  private waiters = new Map<string, Waiter>()
  private outbox: string[] = []
  /** Runs followed: resubscribed after every reconnect until they end. */
  private follows = new Set<string>()
  private retry = 0
  private timer?: ReturnType<typeof setTimeout>
  private closed = false
  private everOpened = false
  status: SocketStatus = 'connecting'
  /** Connections opened so far (tests read it). */
  opens = 0
  /** How commands and events travel: the WebSocket, or HTTP + SSE. */
  mode: 'websocket' | 'sse' = 'websocket'
  /** SSE streams of the followed runs (sse mode). */
  private streams = new Map<string, { stop: () => void }>()

  constructor(opts: SocketOptions) {
    this.opts = opts
    this.connect()
  }

  private url(): string {
    if (this.opts.url) return this.opts.url
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:'
    return `${proto}//${location.host}/api/v1/ws`
  }

  private setStatus(s: SocketStatus) {
    this.status = s
    this.opts.onStatus?.(s)
  }

  private connect() {
    if (this.closed) return
    this.setStatus('connecting')
    const t = token()
    const protocols = ['chatgraph.v1', ...(t ? [`chatgraph.token.${t}`] : [])]
    let ws: WebSocket
    try {
      ws = new WebSocket(this.url(), protocols)
    } catch {
      this.failed()
      return
    }
    this.ws = ws
    ws.onopen = () => {
      if (this.ws !== ws) return
      this.retry = 0
      this.opens++
      this.setStatus('open')
      for (const runId of this.follows) {
        this.raw({ id: newRequestId('sub'), type: 'subscribe', runId, afterSeq: this.opts.cursor(runId) })
      }
      const queued = this.outbox
      this.outbox = []
      for (const f of queued) ws.send(f)
      if (this.everOpened) this.opts.onReconnect?.()
      this.everOpened = true
    }
    ws.onmessage = (m) => {
      if (this.ws !== ws) return
      let f: ServerFrame
      try {
        f = JSON.parse(String(m.data)) as ServerFrame
      } catch {
        return
      }
      this.frame(f)
    }
    ws.onclose = () => {
      if (this.ws !== ws) return
      this.ws = undefined
      // Commands sent but not answered: their fate is unknown here; the
      // caller resyncs from the API (onReconnect).
      for (const [, w] of this.waiters) w.reject(new SocketError('disconnected', 'the connection dropped'))
      this.waiters.clear()
      this.setStatus('closed')
      this.failed()
    }
    ws.onerror = () => {
      /* onclose follows */
    }
  }

  /** A connection attempt failed or a connection closed. */
  private failed() {
    if (!this.everOpened && this.retry + 1 >= (this.opts.fallbackAfter ?? 2)) this.fallback()
    else this.scheduleReconnect()
  }

  /** Switches to HTTP + SSE: queued commands are sent, followed runs streamed. */
  private fallback() {
    if (this.closed || this.mode === 'sse') return
    this.mode = 'sse'
    clearTimeout(this.timer)
    const queued = this.outbox
    this.outbox = []
    for (const raw of queued) {
      const f = JSON.parse(raw) as ClientFrame
      const w = this.waiters.get(f.id)
      if (!w) continue
      this.waiters.delete(f.id)
      this.request(f).then(w.resolve, w.reject)
    }
    for (const runId of this.follows) this.stream(runId)
    this.setStatus('open')
  }

  private stream(runId: string) {
    this.streams.get(runId)?.stop()
    this.streams.set(
      runId,
      streamRun(
        runId,
        () => this.opts.cursor(runId),
        (ev) => this.frame({ type: 'event', event: ev }),
        () => {
          this.streams.delete(runId)
          this.follows.delete(runId)
        },
      ),
    )
  }

  private scheduleReconnect() {
    if (this.closed) return
    const delay = Math.min(5000, 200 * 2 ** this.retry)
    this.retry++
    clearTimeout(this.timer)
    this.timer = setTimeout(() => this.connect(), delay)
  }

  private frame(f: ServerFrame) {
    if (f.type === 'event') {
      const ev = f.event
      if (terminal.has(ev.type)) this.follows.delete(ev.runId)
      this.opts.onEvent(ev)
      return
    }
    const id = f.id
    if (!id) return
    const w = this.waiters.get(id)
    if (!w) return
    this.waiters.delete(id)
    if (f.type === 'ack') w.resolve(f)
    else {
      const e = (f as ErrorFrame).error
      w.reject(new SocketError(e?.code ?? 'internal', e?.message ?? 'error', e?.details))
    }
  }

  private raw(f: ClientFrame) {
    const s = JSON.stringify(f)
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(s)
    else this.outbox.push(s)
  }

  /** Does f go over HTTP: in sse mode, or too big for a frame. */
  private overHttp(f: ClientFrame): boolean {
    return this.mode === 'sse' || frameTooBig(f)
  }

  /** Sends a command; resolves with its ack, rejects with its error frame. */
  request(f: ClientFrame): Promise<AckFrame> {
    if (this.overHttp(f)) {
      return sendCommand(f).catch((e: HttpFailure) => {
        throw new SocketError(e.code, e.message, e.details)
      })
    }
    return new Promise((resolve, reject) => {
      this.waiters.set(f.id, { resolve, reject })
      this.raw(f)
    })
  }

  /**
   * Starts a chat call. The server streams the new run's events on this
   * connection right after the ack; the run is followed across reconnects.
   */
  async chat(f: ClientFrame): Promise<AckFrame> {
    const http = this.overHttp(f)
    const ack = await this.request(f)
    if (ack.runId && http) this.follow(ack.runId)
    else if (ack.runId) this.follows.add(ack.runId)
    return ack
  }

  /** Follows runId's events after the caller's cursor, now and after reconnects. */
  follow(runId: string) {
    if (this.follows.has(runId)) return
    this.follows.add(runId)
    if (this.mode === 'sse') this.stream(runId)
    else if (this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.raw({ id: newRequestId('sub'), type: 'subscribe', runId, afterSeq: this.opts.cursor(runId) })
    }
  }

  unfollow(runId: string) {
    if (!this.follows.delete(runId)) return
    if (this.mode === 'sse') {
      this.streams.get(runId)?.stop()
      this.streams.delete(runId)
      return
    }
    this.raw({ id: newRequestId('unsub'), type: 'unsubscribe', runId })
  }

  isOpen(): boolean {
    return !!this.ws && this.ws.readyState === WebSocket.OPEN
  }

  /** Drops the connection (every SSE stream in sse mode) as a network failure would (it reconnects). */
  drop() {
    if (this.mode === 'sse') {
      for (const runId of this.streams.keys()) this.stream(runId)
      this.opts.onReconnect?.()
      return
    }
    this.ws?.close(4000, 'dropped by the client')
  }

  close() {
    this.closed = true
    clearTimeout(this.timer)
    this.ws?.close(1000)
    for (const s of this.streams.values()) s.stop()
    this.streams.clear()
  }
}
