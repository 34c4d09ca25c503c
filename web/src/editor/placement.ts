// Where a node added from the palette goes: the free spot nearest the
// middle of what the person sees, so it never lands under the side
// panel, under an overlay or on another node's handles.
export interface Rect {
  x: number
  y: number
  w: number
  h: number
}

/** Size assumed for a node React Flow has not measured yet. */
export const defaultNodeSize = { w: 220, h: 120 }

function overlaps(a: Rect, b: Rect, margin: number): boolean {
  return a.x < b.x + b.w + margin && b.x < a.x + a.w + margin && a.y < b.y + b.h + margin && b.y < a.y + a.h + margin
}

function inside(a: Rect, view: Rect): boolean {
  return a.x >= view.x && a.y >= view.y && a.x + a.w <= view.x + view.w && a.y + a.h <= view.y + view.h
}

/**
 * The top-left corner for a new node of size `size`: the candidate nearest
 * `from` (a top-left corner; default: centred in `view`, flow
 * coordinates) that keeps `margin` away from every rect in `taken`.
 * Candidates lie on a grid around it; ones inside the view win over ones
 * outside it. "Nearest" leans right, then down (graphs read left to
 * right). Always returns a spot.
 */
export function freeSpot(
  view: Rect,
  taken: Rect[],
  size = defaultNodeSize,
  margin = 30,
  from?: { x: number; y: number },
): { x: number; y: number } {
  const cx = from?.x ?? view.x + view.w / 2 - size.w / 2
  const cy = from?.y ?? view.y + view.h / 2 - size.h / 2
  const stepX = size.w + margin
  const stepY = size.h + margin
  const candidates: { x: number; y: number; d: number }[] = []
  const rings = 8
  for (let i = -rings; i <= rings; i++) {
    for (let j = -rings; j <= rings; j++) {
      const x = cx + i * stepX * 0.5
      const y = cy + j * stepY * 0.5
      candidates.push({ x, y, d: Math.abs(i) * (i < 0 ? 1.6 : 1) + Math.abs(j) * (j < 0 ? 1.4 : 1.2) })
    }
  }
  candidates.sort((a, b) => a.d - b.d || a.y - b.y || a.x - b.x)
  let outside: { x: number; y: number } | undefined
  for (const c of candidates) {
    const r = { x: c.x, y: c.y, w: size.w, h: size.h }
    if (taken.some((t) => overlaps(r, t, margin))) continue
    if (inside(r, view)) return { x: Math.round(c.x), y: Math.round(c.y) }
    outside ??= { x: Math.round(c.x), y: Math.round(c.y) }
  }
  if (outside) return outside
  // Everything near is taken: below the lowest node.
  const bottom = Math.max(...taken.map((t) => t.y + t.h))
  return { x: Math.round(cx), y: Math.round(bottom + margin) }
}
