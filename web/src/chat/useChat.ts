// One chat session: the message tree from the API, the calls that start
// runs (over the WebSocket, with a client request id so Stop works before
// any event), and keeping the runs shown on the active branch followed.
import { useCallback, useEffect, useMemo, useRef, useState } from 'react'
import { api, call, loadChat } from '../api/client'
import { newRequestId, SocketError } from '../api/socket'
import type { AckFrame, Chat, ChatCallType, ClientFrame } from '../api/types'
import { isRunFinished } from '../stream/reducer'
import { onReconnect, runStore, socket } from '../stream/store'
import { branch, buildTree, newestLeaf } from './tree'

export interface Inflight {
  chatId: string
  crid: string
  type: ChatCallType
  runId?: string
}

/**
 * What became of a chat call: its ack; 'refused' (the server said no, and
 * onError showed why); 'unknown' (the connection dropped before the answer:
 * the chat is re-read, the call may have started).
 */
export type CallOutcome = AckFrame | 'refused' | 'unknown'

const terminal = new Set(['run_completed', 'run_failed', 'run_cancelled', 'run_interrupted'])

export function useChat(chatId: string | undefined, onError: (msg: string) => void) {
  const [chat, setChat] = useState<Chat | null>(null)
  const [inflight, setInflight] = useState<Inflight | null>(null)
  const chatRef = useRef<string | undefined>(chatId)
  chatRef.current = chatId
  const inflightRef = useRef(inflight)
  inflightRef.current = inflight

  const followBranch = useCallback((c: Chat) => {
    const tree = buildTree(c.messages ?? [])
    const path = branch(tree, c.activeLeafId)
    for (const m of path) {
      if (!m.runId || m.role !== 'assistant') continue
      const known = runStore.getState().runs[m.runId]
      const live = m.status === 'running' || m.status === 'pending'
      // Live runs: follow (replays what this page missed, then streams).
      // Finished ones: replay their log once so statuses and approvals show.
      if (live || !known) socket.follow(m.runId)
      else if (known && !isRunFinished(known.status)) socket.follow(m.runId)
    }
  }, [])

  const refresh = useCallback(async (): Promise<Chat | undefined> => {
    const id = chatRef.current
    if (!id) return undefined
    try {
      const c = await loadChat(id)
      if (chatRef.current !== id) return undefined
      setChat(c)
      followBranch(c)
      return c
    } catch (e) {
      onError(e instanceof Error ? e.message : String(e))
      return undefined
    }
  }, [followBranch, onError])

  useEffect(() => {
    setChat(null)
    // A call started for a chat created a moment ago stays in flight.
    setInflight((cur) => (cur && cur.chatId === chatId ? cur : null))
    if (chatId) void refresh()
  }, [chatId, refresh])

  // A run of this chat ended: its message changed. The server writes the
  // message's final status just after it publishes the run's terminal
  // event, so re-read until the message says so too (bounded). A
  // reconnect may have lost acks: resync.
  const settle = useCallback(
    async (runId: string) => {
      for (let i = 0; i < 8; i++) {
        const c = await refresh()
        const m = c?.messages?.find((x) => x.runId === runId && x.role === 'assistant')
        if (!m || (m.status !== 'running' && m.status !== 'pending')) return
        await new Promise((r) => setTimeout(r, Math.min(1000, 50 * 2 ** i)))
      }
    },
    [refresh],
  )

  useEffect(() => {
    const off1 = runStore.onEvent((ev) => {
      if (!terminal.has(ev.type)) return
      if (inflightRef.current?.runId === ev.runId) setInflight(null)
      if (ev.chatId && ev.chatId === chatRef.current) void settle(ev.runId)
    })
    const off2 = onReconnect(() => void refresh())
    return () => {
      off1()
      off2()
    }
  }, [refresh, settle])

  /** Starts a chat call over the WebSocket; its frame id is the clientRequestId. */
  const start = useCallback(
    async (chatId: string, type: ChatCallType, fields: Omit<Extract<ClientFrame, { type: ChatCallType }>, 'id' | 'type' | 'chatId'>): Promise<CallOutcome> => {
      const crid = newRequestId()
      setInflight({ chatId, crid, type })
      try {
        const ack = await socket.chat({ id: crid, type, chatId, ...fields } as ClientFrame)
        setInflight((cur) => (cur?.crid === crid ? { ...cur, runId: ack.runId } : cur))
        if (ack.runId && isRunFinished(runStore.getState().runs[ack.runId]?.status)) setInflight(null)
        await refresh()
        return ack
      } catch (e) {
        setInflight((cur) => (cur?.crid === crid ? null : cur))
        if (e instanceof SocketError && e.code === 'disconnected') {
          void refresh()
          return 'unknown'
        }
        onError(e instanceof Error ? e.message : String(e))
        return 'refused'
      }
    },
    [refresh, onError],
  )

  // stop cancels the call in flight (or whatever runs in the chat);
  // with action 'rollback' it also takes the call back: the server
  // deletes its turn's messages before it answers, and the chat is read
  // again without them.
  const stop = useCallback(
    async (action: 'interrupt' | 'rollback' = 'interrupt') => {
      const id = chatRef.current
      if (!id) return
      const f = inflightRef.current
      try {
        if (f && socket.isOpen()) {
          // A clientRequestId names a call in its chat: with the chat, the
          // cancel reaches it from any connection (this one may have been
          // reconnected since the call went out).
          await socket.request({ id: newRequestId('cancel'), type: 'cancel', chatId: f.chatId, clientRequestId: f.crid, action })
        } else if (f) {
          await call(api.POST('/api/v1/chats/{id}/cancel', { params: { path: { id } }, body: { clientRequestId: f.crid, action } }))
        } else {
          await call(api.POST('/api/v1/chats/{id}/cancel', { params: { path: { id } }, body: { action } }))
        }
        if (action === 'rollback') await refresh()
      } catch (e) {
        onError(e instanceof Error ? e.message : String(e))
      }
    },
    [onError, refresh],
  )

  const switchTo = useCallback(
    async (messageId: string) => {
      const id = chatRef.current
      if (!id || !chat) return
      const tree = buildTree(chat.messages ?? [])
      const m = tree.byId.get(messageId)
      if (!m) return
      const leaf = newestLeaf(tree, m)
      try {
        let c = await call(api.PUT('/api/v1/chats/{id}/active-leaf', { params: { path: { id } }, body: { messageId: leaf.id } }))
        // A long chat comes cut at its first 1000 messages: read it whole.
        if (c.messagesCursor) c = await loadChat(id)
        setChat(c)
        followBranch(c)
      } catch (e) {
        onError(e instanceof Error ? e.message : String(e))
      }
    },
    [chat, followBranch, onError],
  )

  const path = useMemo(() => (chat ? branch(buildTree(chat.messages ?? []), chat.activeLeafId) : []), [chat])
  const lastRunId = useMemo(() => {
    for (let i = path.length - 1; i >= 0; i--) if (path[i].role === 'assistant' && path[i].runId) return path[i].runId as string
    return undefined
  }, [path])

  return { chat, setChat, path, inflight, start, stop, switchTo, refresh, lastRunId: inflight?.runId ?? lastRunId }
}
