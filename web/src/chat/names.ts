// What a chat is called in the list. The server keeps a title given when
// the chat is created (the page creates a chat with its first message as
// the title), but has no call to change it later; so a name the person
// edits is kept in this browser's localStorage, keyed by chat id, and
// wins over the server's title.
import { useCallback, useSyncExternalStore } from 'react'

const KEY = 'chatgraph.chatNames'
const listeners = new Set<() => void>()
let cache: Record<string, string> | undefined

function read(): Record<string, string> {
  if (cache) return cache
  try {
    const v = JSON.parse(localStorage.getItem(KEY) ?? '{}') as unknown
    cache = v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, string>) : {}
  } catch {
    cache = {}
  }
  return cache
}

export function setChatName(id: string, name: string) {
  const next = { ...read() }
  const n = name.trim()
  if (n) next[id] = n.slice(0, 200)
  else delete next[id]
  cache = next
  localStorage.setItem(KEY, JSON.stringify(next))
  listeners.forEach((l) => l())
}

/** A title made from a first message: one line, at most 60 characters. */
export function titleFrom(text: string): string {
  const line = text.replace(/\s+/g, ' ').trim()
  return line.length > 60 ? `${line.slice(0, 59)}…` : line
}

export interface NamedChat {
  id: string
  title?: string
  createdAt?: string
}

/** The name shown for a chat: edited here, else the server's title, else the first message, else its time. */
export function chatName(c: NamedChat, edited: Record<string, string>, firstMessage?: string): string {
  if (edited[c.id]) return edited[c.id]
  if (c.title) return c.title
  if (firstMessage) return titleFrom(firstMessage)
  return c.createdAt ? `Chat of ${new Date(c.createdAt).toLocaleString()}` : 'New chat'
}

export function useChatNames() {
  const names = useSyncExternalStore(
    (l) => {
      listeners.add(l)
      return () => listeners.delete(l)
    },
    read,
  )
  const rename = useCallback((id: string, name: string) => setChatName(id, name), [])
  return { names, rename }
}
