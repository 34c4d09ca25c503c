// Starter graphs: what an empty canvas offers and the Templates menu
// loads. Each is an ordinary graph (the wire shape), valid as it stands
// with the offline echo model; a browser test saves every one.
import type { GraphInput } from '../api/types'

export interface Template {
  id: string
  name: string
  /** One line for the menu. */
  description: string
  graph: Required<Pick<GraphInput, 'nodes' | 'edges'>>
}

const flow = { channel: 'flow' as const }
const link = { channel: 'link' as const }

/**
 * Chat start → agent "assistant" → chat output, and a calculator tool
 * node linked to the agent's tools port when calculator is given.
 */
function assistantGraph(agent: Record<string, unknown>, calculator?: Record<string, unknown>): Template['graph'] {
  const graph: Template['graph'] = {
    nodes: [
      { id: 'start', type: 'chat_start', position: { x: 0, y: 0 }, data: {} },
      { id: 'assistant', type: 'agent', position: { x: 300, y: 0 }, data: agent },
      { id: 'out', type: 'chat_output', position: { x: 620, y: 0 }, data: {} },
    ],
    edges: [
      { id: 'e1', source: 'start', sourceHandle: 'message', target: 'assistant', targetHandle: 'input', data: flow },
      { id: 'e2', source: 'assistant', sourceHandle: 'output', target: 'out', targetHandle: 'input', data: flow },
    ],
  }
  if (calculator) {
    graph.nodes.splice(2, 0, { id: 'calculator', type: 'tool', position: { x: 0, y: 220 }, data: calculator })
    graph.edges.push({ id: 'e3', source: 'calculator', sourceHandle: 'tool', target: 'assistant', targetHandle: 'tools', data: link })
  }
  return graph
}

export const templates: Template[] = [
  {
    id: 'simple-chat',
    name: 'Simple chat',
    description: 'Chat start → agent → chat output: the smallest graph that answers.',
    graph: assistantGraph({ name: 'Assistant', model: 'echo', tokenDelayMs: 40 }),
  },
  {
    id: 'agent-tool',
    name: 'Agent with a tool',
    description: 'An agent that can call the calculator (a tool linked to its tools port).',
    graph: assistantGraph(
      { name: 'Assistant', model: 'echo', systemPrompt: 'Use the calculator for arithmetic.', tokenDelayMs: 40 },
      { name: 'calculator' },
    ),
  },
  {
    id: 'approval-tool',
    name: 'Approval before a tool',
    description: 'The agent asks you before every calculator call; approve or deny in the chat.',
    graph: assistantGraph(
      { name: 'Careful assistant', model: 'echo', tokenDelayMs: 40 },
      { name: 'calculator', requireApproval: true },
    ),
  },
  {
    id: 'router',
    name: 'Router',
    description: 'Questions about the weather go to one agent, everything else to another.',
    graph: {
      nodes: [
        { id: 'start', type: 'chat_start', position: { x: 0, y: 120 }, data: {} },
        { id: 'router', type: 'router', position: { x: 280, y: 120 }, data: {} },
        { id: 'forecaster', type: 'agent', position: { x: 700, y: 0 }, data: { name: 'Forecaster', model: 'echo', tokenDelayMs: 40 } },
        { id: 'helper', type: 'agent', position: { x: 700, y: 260 }, data: { name: 'Helper', model: 'echo', tokenDelayMs: 40 } },
        { id: 'out', type: 'chat_output', position: { x: 1020, y: 120 }, data: { join: 'any' } },
      ],
      edges: [
        { id: 'e1', source: 'start', sourceHandle: 'message', target: 'router', targetHandle: 'input', data: flow },
        {
          id: 'weather',
          source: 'router',
          sourceHandle: 'output',
          target: 'forecaster',
          targetHandle: 'input',
          data: { ...flow, condition: 'output.content.contains("weather")' },
        },
        {
          id: 'other',
          source: 'router',
          sourceHandle: 'output',
          target: 'helper',
          targetHandle: 'input',
          data: { ...flow, condition: '!output.content.contains("weather")' },
        },
        { id: 'e4', source: 'forecaster', sourceHandle: 'output', target: 'out', targetHandle: 'input', data: flow },
        { id: 'e5', source: 'helper', sourceHandle: 'output', target: 'out', targetHandle: 'input', data: flow },
      ],
    },
  },
]

interface SuggestNode {
  type?: string
  data?: Record<string, unknown>
}
interface SuggestEdge {
  data?: { condition?: unknown }
}

const toolExamples: Record<string, string> = {
  calculator: '/tool calculator {"expression":"6*7"}',
  current_time: '/tool current_time',
}

/**
 * Messages worth trying with a graph, for an empty chat: a greeting, a
 * call of every tool the graph links (the echo model calls a tool when a
 * message starts with "/tool NAME"), and a message for each word a
 * condition looks for.
 */
export function suggestions(nodes: SuggestNode[], edges: SuggestEdge[]): string[] {
  const out = ['Hello! What can you do?']
  for (const n of nodes) {
    if (n.type !== 'tool') continue
    const name = typeof n.data?.name === 'string' ? n.data.name : ''
    if (!name) continue
    const s = toolExamples[name] ?? `/tool ${name}`
    if (!out.includes(s)) out.push(s)
  }
  for (const e of edges) {
    const c = typeof e.data?.condition === 'string' ? e.data.condition : ''
    for (const m of c.matchAll(/contains\("([^"]{1,40})"\)/g)) {
      const s = `What about the ${m[1]} today?`
      if (!out.includes(s)) out.push(s)
    }
  }
  return out.slice(0, 4)
}
