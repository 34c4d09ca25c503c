// A layered (Sugiyama-style, simplified) layout for imported graphs and
// the Layout button: each connected part of the graph gets layers by
// longest path over its edges (back edges of cycles ignored) and a few
// barycenter sweeps to order each layer; the parts are stacked top to
// bottom, and nodes with no edge at all go in rows under them (never in
// the first layer, where they would push the connected nodes around and
// make edges run backwards).
export interface LayoutNode {
  id: string
}
export interface LayoutEdge {
  source: string
  target: string
}

export interface LayoutOptions {
  layerGap?: number
  nodeGap?: number
}

export function layeredLayout(
  nodes: LayoutNode[],
  edges: LayoutEdge[],
  opts: LayoutOptions = {},
): Record<string, { x: number; y: number }> {
  const layerGap = opts.layerGap ?? 300
  const nodeGap = opts.nodeGap ?? 170
  const ids = nodes.map((n) => n.id)
  const known = new Set(ids)
  const inner = edges.filter((e) => known.has(e.source) && known.has(e.target) && e.source !== e.target)

  // Connected parts (union-find), in the order of their first node.
  const parent = new Map(ids.map((id) => [id, id]))
  const find = (x: string): string => {
    while (parent.get(x) !== x) {
      parent.set(x, parent.get(parent.get(x)!)!)
      x = parent.get(x)!
    }
    return x
  }
  for (const e of inner) parent.set(find(e.source), find(e.target))
  const linked = new Set(inner.flatMap((e) => [e.source, e.target]))
  const parts = new Map<string, string[]>()
  const lonely: string[] = []
  for (const id of ids) {
    if (!linked.has(id)) lonely.push(id)
    else {
      const r = find(id)
      const list = parts.get(r) ?? []
      list.push(id)
      parts.set(r, list)
    }
  }

  const result: Record<string, { x: number; y: number }> = {}
  let top = 0
  let widest = 1
  for (const part of parts.values()) {
    const set = new Set(part)
    const { pos, layers, rows } = layoutPart(
      part,
      inner.filter((e) => set.has(e.source)),
      layerGap,
      nodeGap,
    )
    for (const [id, p] of Object.entries(pos)) result[id] = { x: p.x, y: p.y + top }
    top += rows * nodeGap
    widest = Math.max(widest, layers)
  }
  const perRow = Math.max(3, widest)
  lonely.forEach((id, i) => {
    result[id] = { x: (i % perRow) * layerGap, y: top + Math.floor(i / perRow) * nodeGap }
  })
  return result
}

/** One connected part: positions from (0, 0), its number of layers and of rows. */
function layoutPart(
  ids: string[],
  edges: LayoutEdge[],
  layerGap: number,
  nodeGap: number,
): { pos: Record<string, { x: number; y: number }>; layers: number; rows: number } {
  const out = new Map<string, string[]>()
  for (const id of ids) out.set(id, [])
  for (const e of edges) out.get(e.source)!.push(e.target)

  // Drop back edges (DFS) so the rest is a DAG.
  const state = new Map<string, 0 | 1 | 2>()
  const dag = new Map<string, string[]>()
  for (const id of ids) dag.set(id, [])
  const visit = (u: string) => {
    state.set(u, 1)
    for (const v of out.get(u)!) {
      const s = state.get(v) ?? 0
      if (s === 1) continue // back edge
      dag.get(u)!.push(v)
      if (s === 0) visit(v)
    }
    state.set(u, 2)
  }
  for (const id of ids) if (!state.get(id)) visit(id)

  // Longest path layering.
  const indeg = new Map<string, number>(ids.map((id) => [id, 0]))
  for (const vs of dag.values()) for (const v of vs) indeg.set(v, indeg.get(v)! + 1)
  const layer = new Map<string, number>(ids.map((id) => [id, 0]))
  const queue = ids.filter((id) => indeg.get(id) === 0)
  while (queue.length) {
    const u = queue.shift()!
    for (const v of dag.get(u)!) {
      layer.set(v, Math.max(layer.get(v)!, layer.get(u)! + 1))
      indeg.set(v, indeg.get(v)! - 1)
      if (indeg.get(v) === 0) queue.push(v)
    }
  }
  // Sources that only feed a later layer (a tool linked into an agent)
  // sit in the layer just before their first target.
  for (const id of ids) {
    const targets = dag.get(id)!
    const preds = [...dag.entries()].some(([, vs]) => vs.includes(id))
    if (!preds && targets.length > 0) layer.set(id, Math.max(0, Math.min(...targets.map((t) => layer.get(t)!)) - 1))
  }

  const layers: string[][] = []
  for (const id of ids) (layers[layer.get(id)!] ??= []).push(id)
  const pos = new Map<string, number>()
  const renumber = () => layers.forEach((l) => l?.forEach((id, i) => pos.set(id, i)))
  renumber()
  const preds = new Map<string, string[]>(ids.map((id) => [id, []]))
  for (const [u, vs] of dag) for (const v of vs) preds.get(v)!.push(u)
  const bary = (id: string, nbrs: string[]) => (nbrs.length ? nbrs.reduce((s, n) => s + pos.get(n)!, 0) / nbrs.length : pos.get(id)!)
  for (let sweep = 0; sweep < 4; sweep++) {
    const down = sweep % 2 === 0
    const order = down ? layers.keys() : [...layers.keys()].reverse()
    for (const li of order) {
      const l = layers[li]
      if (!l) continue
      const score = new Map(l.map((id) => [id, bary(id, down ? preds.get(id)! : dag.get(id)!)]))
      l.sort((a, b) => score.get(a)! - score.get(b)! || ids.indexOf(a) - ids.indexOf(b))
      l.forEach((id, i) => pos.set(id, i))
    }
  }
  const tallest = Math.max(1, ...layers.map((l) => l?.length ?? 0))
  const result: Record<string, { x: number; y: number }> = {}
  layers.forEach((l, li) => {
    if (!l) return
    const offset = ((tallest - l.length) * nodeGap) / 2
    l.forEach((id, i) => (result[id] = { x: li * layerGap, y: offset + i * nodeGap }))
  })
  return { pos: result, layers: layers.length, rows: tallest }
}

/** True when positions carry no layout (missing, or most nodes stacked on one point). */
export function needsLayout(nodes: { position?: { x?: number; y?: number } | null }[]): boolean {
  if (nodes.length < 2) return false
  const seen = new Set<string>()
  let dup = 0
  for (const n of nodes) {
    if (!n.position || typeof n.position.x !== 'number' || typeof n.position.y !== 'number') return true
    const k = `${Math.round(n.position.x / 20)},${Math.round(n.position.y / 20)}`
    if (seen.has(k)) dup++
    seen.add(k)
  }
  return dup * 2 >= nodes.length - 1
}
