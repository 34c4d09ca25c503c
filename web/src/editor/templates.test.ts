import { describe, expect, it } from 'vitest'
import { suggestions, templates } from './templates'

describe('templates', () => {
  it('are graphs whose edges name nodes they have, with a channel each', () => {
    expect(templates.map((t) => t.name)).toEqual(['Simple chat', 'Agent with a tool', 'Approval before a tool', 'Router'])
    for (const t of templates) {
      const ids = new Set(t.graph.nodes.map((n) => n.id))
      for (const e of t.graph.edges) {
        expect(ids.has(e.source) && ids.has(e.target)).toBe(true)
        expect(['flow', 'link']).toContain(e.data?.channel)
      }
    }
  })
  it('suggest messages that exercise the graph', () => {
    const tool = templates.find((t) => t.id === 'agent-tool')!
    expect(suggestions(tool.graph.nodes, tool.graph.edges)).toContain('/tool calculator {"expression":"6*7"}')
    const router = templates.find((t) => t.id === 'router')!
    expect(suggestions(router.graph.nodes, router.graph.edges)).toContain('What about the weather today?')
  })
})
