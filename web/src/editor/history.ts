// Undo/redo over editor snapshots. Snapshots are immutable values (the
// editor never mutates nodes or edges in place), so keeping references is
// enough.
export class History<T> {
  private past: T[] = []
  private future: T[] = []
  private readonly limit: number

  constructor(limit = 200) {
    this.limit = limit
  }

  /** Records the state before a change. */
  push(before: T) {
    this.past.push(before)
    if (this.past.length > this.limit) this.past.shift()
    this.future = []
  }

  undo(current: T): T | undefined {
    const prev = this.past.pop()
    if (prev === undefined) return undefined
    this.future.push(current)
    return prev
  }

  redo(current: T): T | undefined {
    const next = this.future.pop()
    if (next === undefined) return undefined
    this.past.push(current)
    return next
  }

  clear() {
    this.past = []
    this.future = []
  }

  get canUndo() {
    return this.past.length > 0
  }
  get canRedo() {
    return this.future.length > 0
  }
}
