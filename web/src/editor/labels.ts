// Edge labels that never sit on top of each other: every label reports
// where it wants to be (the middle of its edge) and its size; the labels
// are then placed in order, each moved down just below any label it
// would overlap. Moving only down terminates and keeps the order stable.
import { useSyncExternalStore } from 'react'

export interface LabelBox {
  /** Centre wanted, flow coordinates. */
  x: number
  y: number
  w: number
  h: number
}

const gap = 4

function hit(a: LabelBox, b: LabelBox): boolean {
  return Math.abs(a.x - b.x) * 2 < a.w + b.w + gap * 2 && Math.abs(a.y - b.y) * 2 < a.h + b.h + gap * 2
}

/** Centres for the labels such that no two overlap (by id). */
export function separateLabels(boxes: Record<string, LabelBox>): Record<string, { x: number; y: number }> {
  const order = Object.entries(boxes).sort(([ia, a], [ib, b]) => a.y - b.y || a.x - b.x || (ia < ib ? -1 : ia > ib ? 1 : 0))
  const placed: LabelBox[] = []
  const out: Record<string, { x: number; y: number }> = {}
  for (const [id, b] of order) {
    const cur = { ...b }
    for (let guard = 0; guard <= placed.length; guard++) {
      const blocker = placed.find((p) => hit(cur, p))
      if (!blocker) break
      cur.y = blocker.y + blocker.h / 2 + gap * 2 + cur.h / 2
    }
    placed.push(cur)
    out[id] = { x: cur.x, y: cur.y }
  }
  return out
}

type Listener = () => void

/** The canvas's labels: edges report their box, read their place. */
export class LabelLayout {
  private boxes: Record<string, LabelBox> = {}
  private placed: Record<string, { x: number; y: number }> = {}
  private listeners = new Set<Listener>()
  private queued = false

  subscribe = (l: Listener) => {
    this.listeners.add(l)
    return () => {
      this.listeners.delete(l)
    }
  }

  get = (id: string) => this.placed[id]

  /** Reports (or, with undefined, withdraws) a label's wanted box. */
  report(id: string, box: LabelBox | undefined) {
    const old = this.boxes[id]
    if (!box) {
      if (!old) return
      delete this.boxes[id]
    } else {
      if (old && old.x === box.x && old.y === box.y && old.w === box.w && old.h === box.h) return
      this.boxes[id] = box
    }
    if (this.queued) return
    this.queued = true
    queueMicrotask(() => {
      this.queued = false
      const next = separateLabels(this.boxes)
      const changed = Object.keys(next).length !== Object.keys(this.placed).length || Object.entries(next).some(([k, p]) => this.placed[k]?.x !== p.x || this.placed[k]?.y !== p.y)
      this.placed = next
      if (changed) for (const l of this.listeners) l()
    })
  }
}

export function useLabelPlace(layout: LabelLayout, id: string) {
  return useSyncExternalStore(layout.subscribe, () => layout.get(id))
}
