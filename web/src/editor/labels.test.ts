import { describe, expect, it } from 'vitest'
import { separateLabels, type LabelBox } from './labels'
import type { Rect } from './placement'

const overlap = (a: Rect, b: Rect) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h

describe('separateLabels', () => {
  it('moves labels that would overlap, leaves the others', () => {
    const boxes: Record<string, LabelBox> = {
      a: { x: 100, y: 100, w: 120, h: 20 },
      b: { x: 110, y: 105, w: 120, h: 20 },
      c: { x: 500, y: 100, w: 50, h: 20 },
    }
    const p = separateLabels(boxes)
    expect(p.a).toEqual({ x: 100, y: 100 })
    expect(p.c).toEqual({ x: 500, y: 100 })
    expect(p.b.y).toBeGreaterThanOrEqual(100 + 20)
  })
  it('leaves no two labels overlapping, however many share a spot', () => {
    let seed = 7
    const rnd = () => ((seed = (seed * 16807) % 2147483647) / 2147483647)
    const boxes: Record<string, LabelBox> = {}
    for (let i = 0; i < 40; i++) boxes[`e${i}`] = { x: Math.round(rnd() * 300), y: Math.round(rnd() * 200), w: 40 + Math.round(rnd() * 120), h: 18 + Math.round(rnd() * 20) }
    const p = separateLabels(boxes)
    const rects = Object.entries(p).map(([id, c]) => ({ x: c.x - boxes[id].w / 2, y: c.y - boxes[id].h / 2, w: boxes[id].w, h: boxes[id].h }))
    for (let i = 0; i < rects.length; i++) for (let j = i + 1; j < rects.length; j++) expect(overlap(rects[i], rects[j])).toBe(false)
  })
})
