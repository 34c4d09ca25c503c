// Which tools the chat's "your tools" menu offers: the server's rule for
// userTools (see docs/nodes.md, the chat scope), so it never offers a
// tool the server would refuse.

/**
 * The tools of all (in order) a user may enable: those every chat_start
 * list names; where no chat_start lists userTools, the safe ones (no
 * outside effects).
 */
export function allowedUserTools(all: string[], lists: string[][], safe: ReadonlySet<string>): string[] {
  if (lists.length === 0) return all.filter((t) => safe.has(t))
  return all.filter((t) => lists.every((l) => l.includes(t)))
}
