import { describe, expect, it } from 'vitest'
import { layeredLayout } from './layout'

describe('layeredLayout with unconnected nodes', () => {
  it('puts nodes without edges in a row under the connected ones', () => {
    const p = layeredLayout(
      [{ id: 'x' }, { id: 's' }, { id: 'a' }, { id: 'y' }, { id: 'o' }, { id: 'z' }],
      [
        { source: 's', target: 'a' },
        { source: 'a', target: 'o' },
      ],
    )
    // The chain keeps its order left to right on one line.
    expect(p.s.x).toBeLessThan(p.a.x)
    expect(p.a.x).toBeLessThan(p.o.x)
    expect(p.s.y).toBe(p.a.y)
    // The lonely ones: one row, below the chain, side by side.
    expect(p.x.y).toBe(p.y.y)
    expect(p.y.y).toBe(p.z.y)
    expect(p.x.y).toBeGreaterThan(p.s.y)
    expect(new Set([p.x.x, p.y.x, p.z.x]).size).toBe(3)
  })
  it('stacks separate parts instead of interleaving them', () => {
    const p = layeredLayout(
      [{ id: 'a1' }, { id: 'b1' }, { id: 'a2' }, { id: 'b2' }],
      [
        { source: 'a1', target: 'a2' },
        { source: 'b1', target: 'b2' },
      ],
    )
    expect(p.a1.y).toBe(p.a2.y)
    expect(p.b1.y).toBe(p.b2.y)
    expect(p.b1.y).toBeGreaterThan(p.a1.y)
    expect(p.a1.x).toBeLessThan(p.a2.x)
  })
})
