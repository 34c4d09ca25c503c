import { describe, expect, it } from 'vitest'
import { freeSpot, type Rect } from './placement'

const overlap = (a: Rect, b: Rect) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h

describe('freeSpot', () => {
  const view = { x: 0, y: 0, w: 1000, h: 600 }
  const size = { w: 200, h: 100 }
  it('takes the middle of the view when it is free', () => {
    expect(freeSpot(view, [], size)).toEqual({ x: 400, y: 250 })
  })
  it('never overlaps a node, and stays in view while there is room', () => {
    const taken: Rect[] = []
    for (let i = 0; i < 8; i++) {
      const p = freeSpot(view, taken, size)
      const r = { ...p, ...size }
      for (const t of taken) expect(overlap(r, t)).toBe(false)
      expect(r.x >= 0 && r.y >= 0 && r.x + r.w <= 1000 && r.y + r.h <= 600).toBe(true)
      taken.push(r)
    }
  })
  it('starts from a given spot, and leans right of it when it is taken', () => {
    expect(freeSpot(view, [], size, 30, { x: 100, y: 100 })).toEqual({ x: 100, y: 100 })
    const p = freeSpot(view, [{ x: 100, y: 100, ...size }], size, 30, { x: 100, y: 100 })
    expect(p.x).toBeGreaterThan(100 + size.w)
    expect(p.y).toBe(100)
  })
  it('finds a spot outside the view when the view is full', () => {
    const full = [{ x: -50, y: -50, w: 1100, h: 700 }]
    const p = freeSpot(view, full, size)
    expect(overlap({ ...p, ...size }, full[0])).toBe(false)
  })
})
