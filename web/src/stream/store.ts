// The page's run store: the stream reducer's state behind a tiny external
// store (useSyncExternalStore), fed by the one WebSocket.
import { useSyncExternalStore } from 'react'
import type { RunEvent } from '../api/types'
import { ChatSocket, type SocketStatus } from '../api/socket'
import { initialStreamState, streamReducer, type RunView, type StreamAction, type StreamState } from './reducer'

type Listener = () => void

export class RunStore {
  private state: StreamState = initialStreamState
  private listeners = new Set<Listener>()
  private eventListeners = new Set<(ev: RunEvent) => void>()
  private pendingEvents: RunEvent[] = []
  private flushQueued = false

  getState = () => this.state

  subscribe = (l: Listener) => {
    this.listeners.add(l)
    return () => this.listeners.delete(l)
  }

  /** Called for every event after it was applied (terminal events, for instance). */
  onEvent(l: (ev: RunEvent) => void) {
    this.eventListeners.add(l)
    return () => this.eventListeners.delete(l)
  }

  dispatch(a: StreamAction) {
    this.state = streamReducer(this.state, a)
    for (const l of this.listeners) l()
  }

  /**
   * Queues an event; events are applied in one batch per animation-free
   * microtask so a replayed log of thousands of events renders once.
   */
  push(ev: RunEvent) {
    this.pendingEvents.push(ev)
    if (this.flushQueued) return
    this.flushQueued = true
    queueMicrotask(() => {
      this.flushQueued = false
      const evs = this.pendingEvents
      this.pendingEvents = []
      this.dispatch({ type: 'events', events: evs })
      for (const ev of evs) for (const l of this.eventListeners) l(ev)
    })
  }

  cursor = (runId: string) => this.state.runs[runId]?.lastSeq ?? 0
}

export const runStore = new RunStore()

type StatusListener = (s: SocketStatus) => void
const statusListeners = new Set<StatusListener>()
const reconnectListeners = new Set<() => void>()

export const socket = new ChatSocket({
  onEvent: (ev) => runStore.push(ev),
  cursor: (runId) => runStore.cursor(runId),
  onStatus: (s) => statusListeners.forEach((l) => l(s)),
  onReconnect: () => reconnectListeners.forEach((l) => l()),
})

export function onReconnect(l: () => void) {
  reconnectListeners.add(l)
  return () => {
    reconnectListeners.delete(l)
  }
}

export function useSocketStatus(): SocketStatus {
  return useSyncExternalStore(
    (l) => {
      const f = () => l()
      statusListeners.add(f)
      return () => statusListeners.delete(f)
    },
    () => socket.status,
  )
}

export function useRun(runId: string | undefined | null): RunView | undefined {
  return useSyncExternalStore(runStore.subscribe, () => (runId ? runStore.getState().runs[runId] : undefined))
}

export function useRuns(): StreamState['runs'] {
  return useSyncExternalStore(runStore.subscribe, () => runStore.getState().runs)
}

// Tests (and a curious person in the console) reach the socket here.
declare global {
  interface Window {
    __chatgraph?: { socket: ChatSocket; runStore: RunStore }
  }
}
window.__chatgraph = { socket, runStore }
