import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import {
  addNode,
  boxes,
  close,
  connect,
  haveChromium,
  lastAssistant,
  launch,
  newPage,
  open,
  overlaps,
  save,
  screenshot,
  selectNode,
  send,
} from './browser'

const url = inject('serverUrl')
let browser: Browser | undefined

describe.skipIf(!haveChromium)('editor', () => {
  beforeAll(async () => {
    browser = await launch()
  })
  afterAll(async () => close(browser))

  it('builds a graph, saves it, chats and shows live statuses', async () => {
    const { page, ctx, errors } = await newPage(browser!)
    await open(page, url)

    // Palette comes from /api/v1/node-types.
    const types = (await (await fetch(`${url}/api/v1/node-types`)).json()) as { type: string }[]
    for (const t of types) await expect.poll(() => page.getByTestId(`palette-${t.type}`).count()).toBe(1)

    // A palette click puts the node in free space in view: never on
    // another node, never under the side panel or the overlays.
    const start = await addNode(page, 'chat_start')
    const agent = await addNode(page, 'agent')
    const out = await addNode(page, 'chat_output')
    const tool = await addNode(page, 'tool')
    expect([start, agent, out, tool]).toEqual(['chat_start_1', 'agent_1', 'chat_output_1', 'tool_1'])
    const cards = await boxes(page, '.react-flow__node')
    for (let i = 0; i < cards.length; i++) for (let j = i + 1; j < cards.length; j++) expect(overlaps(cards[i], cards[j]), `${cards[i].id} on ${cards[j].id}`).toBe(false)
    const canvas = (await page.getByTestId('canvas').boundingBox())!
    const covers = [...(await boxes(page, '.react-flow__minimap, .react-flow__controls, .legend')), (await page.getByTestId('side-panel').boundingBox())!]
    for (const c of cards) {
      expect(c.x >= canvas.x && c.x + c.width <= canvas.x + canvas.width && c.y >= canvas.y && c.y + c.height <= canvas.y + canvas.height, `${c.id} in view`).toBe(true)
      for (const o of covers) expect(overlaps(c, o), `${c.id} under an overlay`).toBe(false)
    }

    // Ports are handles named after them; link handles look different.
    await expect.poll(() => page.locator(`.react-flow__handle[data-nodeid="${agent}"]`).count()).toBe(4)
    expect(await page.locator(`.react-flow__handle[data-nodeid="${agent}"][data-handleid="tools"]`).getAttribute('class')).toContain('handle-link')
    expect(await page.locator(`.react-flow__handle[data-nodeid="${agent}"][data-handleid="input"]`).getAttribute('class')).toContain('handle-flow')

    await connect(page, start, 'message', agent, 'input')
    await connect(page, agent, 'output', out, 'input')
    await connect(page, tool, 'tool', agent, 'tools')
    await expect.poll(() => page.locator('.react-flow__edge').count()).toBe(3)
    // A flow port refuses a link port, and says so where the pointer let go.
    await connect(page, tool, 'tool', out, 'input')
    await expect.poll(() => page.getByTestId('connect-refusal').textContent()).toBe('a link output cannot connect to a flow port')
    const tip = (await page.getByTestId('connect-refusal').boundingBox())!
    const target = (await page.locator(`.react-flow__handle[data-nodeid="${out}"][data-handleid="input"]`).boundingBox())!
    expect(Math.abs(tip.y + tip.height / 2 - (target.y + target.height / 2))).toBeLessThan(30)
    expect(await page.locator('.react-flow__edge').count()).toBe(3)
    // An input to an input.
    await connect(page, out, 'input', agent, 'input', { from: 'target', to: 'target' })
    await expect.poll(() => page.getByTestId('connect-refusal').textContent()).toBe('an input cannot connect to another input')
    expect(await page.locator('.react-flow__edge').count()).toBe(3)

    // The side panel edits data from the schema, with validation messages.
    await selectNode(page, tool)
    await expect.poll(() => page.getByTestId('error-name').textContent()).toBe('Name: required')
    await page.locator('#field-name').selectOption('calculator')
    await expect.poll(() => page.getByTestId('error-name').count()).toBe(0)
    await selectNode(page, agent)
    await page.locator('#field-temperature').fill('7')
    await expect.poll(() => page.getByTestId('error-temperature').textContent()).toBe('Temperature: must be at most 2')
    await page.locator('#field-temperature').fill('0.5')
    await expect.poll(() => page.getByTestId('error-temperature').count()).toBe(0)
    await page.locator('#field-tokenDelayMs').fill('120')
    // The model field suggests the server's models (GET /api/v1/models ids, here echo) and takes any name.
    expect(await page.locator('#field-model-examples option').evaluateAll((os) => os.map((o) => (o as HTMLOptionElement).value))).toContain('echo')
    expect(await page.locator('#field-model').getAttribute('list')).toBe('field-model-examples')
    await page.getByLabel('graph name').fill('built in the browser')

    await save(page)
    await expect.poll(() => page.getByTestId('notice').textContent()).toContain('Saved v1')

    // What was saved is what was drawn: every edge has its channel.
    const gid = new URLSearchParams((await page.evaluate(() => location.hash)).slice(1)).get('g')!
    const saved = (await (await fetch(`${url}/api/v1/graphs/${gid}`)).json()) as {
      name: string
      edges: { source: string; sourceHandle: string; target: string; targetHandle: string; data: { channel: string } }[]
      nodes: { id: string; data: Record<string, unknown> }[]
    }
    expect(saved.name).toBe('built in the browser')
    expect(saved.edges.map((e) => `${e.source}.${e.sourceHandle}->${e.target}.${e.targetHandle}:${e.data.channel}`).sort()).toEqual([
      'agent_1.output->chat_output_1.input:flow',
      'chat_start_1.message->agent_1.input:flow',
      'tool_1.tool->agent_1.tools:link',
    ])
    expect(saved.nodes.find((n) => n.id === agent)!.data).toMatchObject({ temperature: 0.5, tokenDelayMs: 120 })
    await screenshot(page, 'editor')

    // Chat: tokens stream, statuses turn completed, the edges light up.
    await send(page, 'hello from the browser with several words to stream')
    const a = lastAssistant(page)
    await expect.poll(() => a.getByTestId('msg-body').textContent(), { timeout: 10_000 }).toMatch(/^echo: hello/)
    const partial = (await a.getByTestId('msg-body').textContent())!
    await expect.poll(() => page.getByTestId(`node-${agent}`).getAttribute('data-status')).toMatch(/running|completed/)
    await expect.poll(() => a.getAttribute('data-status'), { timeout: 15_000 }).toBe('completed')
    const final = 'echo: hello from the browser with several words to stream'
    expect(await a.getByTestId('msg-body').textContent()).toBe(final)
    expect(partial.length).toBeLessThan(final.length) // it streamed
    for (const id of [start, agent, out]) {
      expect(await page.getByTestId(`node-${id}`).getAttribute('data-status')).toBe('completed')
      expect(await page.getByTestId(`status-${id}`).textContent()).toBe('Done')
    }
    await expect.poll(() => page.locator('.react-flow__edge.taken').count()).toBe(2)

    // A tool call through the linked tool.
    await send(page, '/tool calculator {"expression":"6*7"}')
    await expect.poll(() => lastAssistant(page).getByTestId('msg-body').textContent(), { timeout: 15_000 }).toBe('tool calculator returned: 42')
    await expect.poll(() => lastAssistant(page).getByTestId('tool-call').textContent()).toContain('42')

    // The inspector's timeline shows the run.
    await expect.poll(() => page.getByTestId('timeline').locator('tbody tr').count()).toBeGreaterThan(8)
    await page.getByTestId('timeline').locator('tr', { hasText: 'tool_result' }).first().click()
    await expect.poll(() => page.getByTestId('node-detail').textContent()).toContain('calculator')
    await expect.poll(() => page.getByTestId('run-item').count()).toBe(2)
    await page.locator('.react-flow__pane').click({ position: { x: 10, y: 10 } }) // close the side panel
    await page.getByTestId('node-panel').waitFor({ state: 'detached' })
    await page.locator('.react-flow__controls-fitview').click()
    await screenshot(page, 'chat')
    expect(errors).toEqual([])
    await ctx.close()
  })
})
