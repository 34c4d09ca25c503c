// A chat is a message tree; the UI shows one branch (root -> active leaf)
// and lets a person switch between siblings ("< 2/3 >").
import type { Message } from '../api/types'

export interface Tree {
  byId: Map<string, Message>
  children: Map<string | null, Message[]>
}

export function buildTree(messages: Message[]): Tree {
  const byId = new Map<string, Message>()
  const children = new Map<string | null, Message[]>()
  for (const m of messages) {
    byId.set(m.id, m)
    const k = m.parentId ?? null
    const list = children.get(k) ?? []
    list.push(m)
    children.set(k, list)
  }
  for (const list of children.values()) list.sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id))
  return { byId, children }
}

/** Root -> leaf path of the active branch. */
export function branch(tree: Tree, leafId: string | null | undefined): Message[] {
  const out: Message[] = []
  const seen = new Set<string>()
  for (let m = leafId ? tree.byId.get(leafId) : undefined; m && !seen.has(m.id); m = m.parentId ? tree.byId.get(m.parentId) : undefined) {
    seen.add(m.id)
    out.push(m)
  }
  return out.reverse()
}

export function siblings(tree: Tree, m: Message): Message[] {
  return tree.children.get(m.parentId ?? null) ?? [m]
}

/** The leaf reached from m by always taking the newest child. */
export function newestLeaf(tree: Tree, m: Message): Message {
  let cur = m
  for (;;) {
    const kids = tree.children.get(cur.id)
    if (!kids || kids.length === 0) return cur
    cur = kids[kids.length - 1]
  }
}
