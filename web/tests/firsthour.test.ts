// A person's first hour: the empty canvas and its starter graphs, the
// chat following a streaming answer, answers as markdown, the keyboard,
// the docked side panel, checks that stay current, dark mode.
import { copyFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { templates } from '../src/editor/templates'
import {
  artifacts,
  basicGraph,
  boxes,
  close,
  createGraph,
  haveChromium,
  lastAssistant,
  launch,
  newPage,
  open,
  overlaps,
  screenshot,
  selectNode,
  send,
} from './browser'

const url = inject('serverUrl')
let browser: Browser | undefined

const status = (page: Page) => lastAssistant(page).getAttribute('data-status')
const body = (page: Page) => lastAssistant(page).getByTestId('msg-body')

/** Nothing on the canvas is under the minimap, the controls or the legend. */
async function expectClearOfOverlays(page: Page) {
  const cards = await boxes(page, '.react-flow__node')
  const covers = await boxes(page, '.react-flow__minimap, .react-flow__controls, .legend')
  expect(covers.length).toBe(3)
  for (const c of cards) for (const o of covers) expect(overlaps(c, o), `${c.id} under ${o.id || 'an overlay'}`).toBe(false)
}

describe.skipIf(!haveChromium)('the first hour', () => {
  beforeAll(async () => {
    browser = await launch()
  })
  afterAll(async () => close(browser))

  it('offers starter graphs on an empty canvas; one loads, saves and chats', async () => {
    // Every starter is a graph the server accepts as it stands.
    for (const t of templates) {
      const r = await fetch(`${url}/api/v1/graphs/validate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(t.graph) })
      expect(await r.json(), t.name).toEqual({ valid: true, diagnostics: [] })
    }

    const { page, ctx, errors } = await newPage(browser!)
    await open(page, url)
    const empty = page.getByTestId('empty-canvas')
    await empty.waitFor()
    expect(await empty.textContent()).toContain('drag a node from the palette')
    expect(await empty.locator('.starter b').allTextContents()).toEqual(['Simple chat', 'Agent with a tool', 'Approval before a tool', 'Router'])
    expect(await page.locator('.react-flow__minimap').count()).toBe(0) // nothing to show yet
    expect(await page.getByTestId('chat-empty').textContent()).toContain('Pick a starter graph')

    await page.getByTestId('starter-agent-tool').click()
    await expect.poll(() => page.locator('.react-flow__node').count()).toBe(4)
    await empty.waitFor({ state: 'detached' })
    await page.locator('.react-flow__minimap').waitFor()
    // Fitted to the view, clear of the overlays.
    await expect.poll(() => expectClearOfOverlays(page).then(() => true, () => false)).toBe(true)

    // Save from the chat's empty state, then try a suggested message.
    await page.getByTestId('chat-empty').getByRole('button', { name: /Save graph/ }).click()
    await expect.poll(() => page.getByTestId('notice').textContent()).toContain('Saved v1')
    const tool = page.getByTestId('suggestion').filter({ hasText: '/tool calculator' })
    await tool.click()
    expect(await page.getByLabel('message', { exact: true }).inputValue()).toBe('/tool calculator {"expression":"6*7"}')
    await page.getByTestId('send').click()
    await expect.poll(() => body(page).textContent(), { timeout: 15_000 }).toBe('tool calculator returned: 42')
    await expect.poll(() => status(page)).toBe('completed')
    // The chat is named after its first message.
    await expect
      .poll(() => page.getByTestId('chat-select').locator('option:checked').textContent())
      .toBe('/tool calculator {"expression":"6*7"}')

    // Renamed, the chat keeps its new name in this browser across a reload.
    await page.getByLabel('rename chat').click()
    await page.getByLabel('chat name').fill('Sums')
    await page.getByLabel('chat name').press('Enter')
    await expect.poll(() => page.getByTestId('chat-select').locator('option:checked').textContent()).toBe('Sums')
    await page.reload()
    await expect.poll(() => page.getByTestId('chat-select').locator('option:checked').textContent()).toBe('Sums')
    await expect.poll(() => page.locator('.react-flow__node').count()).toBe(4)
    // The inspector's timeline shows its type column whole.
    await expect.poll(() => page.getByTestId('timeline').locator('tbody tr').count()).toBeGreaterThan(5)
    const pane = (await page.locator('.insp-timeline').boundingBox())!
    const typeHead = (await page.getByTestId('timeline').locator('th', { hasText: 'type' }).boundingBox())!
    expect(typeHead.x + typeHead.width).toBeLessThanOrEqual(pane.x + pane.width)

    // The Templates menu loads the others; the router's two conditions.
    await page.getByTestId('templates-button').click()
    expect(await page.getByTestId('templates-menu').locator('b').allTextContents()).toEqual(templates.map((t) => t.name))
    await page.getByTestId('template-router').click()
    await expect.poll(() => page.locator('.react-flow__node').count()).toBe(5)
    await expect.poll(() => expectClearOfOverlays(page).then(() => true, () => false)).toBe(true)
    await page.keyboard.press('Control+s')
    await expect.poll(() => page.getByTestId('notice').textContent()).toContain('Saved v1')
    await page.getByTestId('suggestion').filter({ hasText: 'weather' }).click()
    await page.getByTestId('send').click()
    await expect.poll(() => status(page), { timeout: 15_000 }).toBe('completed')
    expect(await body(page).textContent()).toBe('echo: What about the weather today?')
    expect(await page.getByTestId('node-forecaster').getAttribute('data-status')).toBe('completed')
    await expect.poll(() => page.getByTestId('node-helper').getAttribute('data-status')).toBe('skipped')
    expect(errors).toEqual([])
    await ctx.close()
  })

  it('takes the README screenshot: a starter graph and a chat at 1440×900', async () => {
    const ctx = await browser!.newContext({ viewport: { width: 1440, height: 900 } })
    const page = await ctx.newPage()
    await open(page, url)
    await page.getByTestId('starter-agent-tool').click()
    await page.keyboard.press('Control+s')
    await expect.poll(() => page.getByTestId('notice').textContent()).toContain('Saved v1')
    await send(page, 'Hello! Can you **add** numbers?')
    await expect.poll(() => status(page), { timeout: 15_000 }).toBe('completed')
    await send(page, '/tool calculator {"expression":"6*7"}')
    await expect.poll(() => body(page).textContent(), { timeout: 15_000 }).toBe('tool calculator returned: 42')
    await expect.poll(() => page.getByTestId('node-out').getAttribute('data-status')).toBe('completed')
    await page.getByTestId('notice').click() // dismiss the toast
    await page.getByTestId('notice').waitFor({ state: 'detached' })
    const file = await screenshot(page, 'starter')
    // CHATGRAPH_UPDATE_SCREENSHOT=1 make test-web-browser refreshes docs/screenshot.png.
    if (process.env.CHATGRAPH_UPDATE_SCREENSHOT) copyFileSync(file, join(artifacts, '..', '..', 'docs', 'screenshot.png'))
    await ctx.close()
  })

  it('follows a streaming answer to the bottom, and leaves a reader where they scrolled', async () => {
    const { page, ctx, errors } = await newPage(browser!)
    const gid = await createGraph(url, basicGraph({ tokenDelayMs: 25 }))
    await open(page, url, `g=${gid}`)
    const list = page.getByTestId('messages')
    const gap = () => list.evaluate((el) => el.scrollHeight - el.scrollTop - el.clientHeight)
    // Long enough that one answer is taller than the panel.
    const para = (n: number) => Array.from({ length: 12 }, (_, i) => `word${n}-${i}`).join(' ')
    const long = Array.from({ length: 14 }, (_, n) => para(n)).join('\n\n')
    await send(page, long)
    await expect.poll(() => status(page)).toBe('running')
    // While it streams, the newest words stay in view (every look at the
    // list finds it at the bottom), and the agent's card keeps its height.
    const misses: number[] = []
    const cardHeights = new Set<number>()
    let looks = 0
    await expect
      .poll(
        async () => {
          const st = await page.evaluate(() => {
            const el = document.querySelector('[data-testid="messages"]')!
            const answers = el.querySelectorAll('[data-role="assistant"]')
            const a = answers[answers.length - 1]
            const card = document.querySelector('[data-testid="node-agent"]')!
            return {
              status: a?.getAttribute('data-status'),
              len: a?.querySelector('[data-testid="msg-body"]')?.textContent?.length ?? 0,
              gap: el.scrollHeight - el.scrollTop - el.clientHeight,
              scrolls: el.scrollHeight > el.clientHeight,
              live: !!card.querySelector('[data-testid="node-live"]'),
              card: Math.round(card.getBoundingClientRect().height),
            }
          })
          if (st.status !== 'running') return 'finished'
          if (st.scrolls) {
            looks++
            if (st.gap > 24) misses.push(st.gap)
          }
          if (st.live) cardHeights.add(st.card)
          return st.len > long.length / 2 ? 'checked' : 'waiting'
        },
        { timeout: 20_000 },
      )
      .toBe('checked')
    expect(misses).toEqual([])
    expect(looks).toBeGreaterThan(3)
    expect(cardHeights.size).toBe(1)
    await expect.poll(() => status(page), { timeout: 20_000 }).toBe('completed')
    await expect.poll(gap).toBeLessThanOrEqual(24)

    // Scrolled up during the next answer: it stays put and says something is new.
    await send(page, long)
    await expect.poll(() => status(page)).toBe('running')
    await list.evaluate((el) => el.scrollTo({ top: 0 }))
    await expect.poll(() => page.getByTestId('new-messages').count(), { timeout: 10_000 }).toBe(1)
    expect(await list.evaluate((el) => el.scrollTop)).toBeLessThan(50)
    await page.getByTestId('new-messages').click()
    await expect.poll(gap).toBeLessThanOrEqual(24)
    await expect.poll(() => page.getByTestId('new-messages').count()).toBe(0)
    await expect.poll(() => status(page), { timeout: 20_000 }).toBe('completed')
    await expect.poll(gap).toBeLessThanOrEqual(24)
    expect(errors).toEqual([])
    await ctx.close()
  })

  it('renders answers as markdown, runs none of their HTML, copies them', async () => {
    const { page, ctx, errors } = await newPage(browser!)
    await ctx.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: url })
    const gid = await createGraph(url, basicGraph())
    await open(page, url, `g=${gid}`)
    await send(
      page,
      [
        '**what** and `code`',
        '',
        '- one',
        '- two',
        '',
        '```',
        'let x = 1',
        '```',
        '',
        'A [link](javascript:window.__pwned=3) and <img src="x" onerror="window.__pwned = 2"> inline.',
        '',
        '<script>window.__pwned = 1</script>',
      ].join('\n'),
    )
    await expect.poll(() => status(page), { timeout: 15_000 }).toBe('completed')
    const b = body(page)
    expect(await b.locator('strong').textContent()).toBe('what')
    expect(await b.locator('li').allTextContents()).toEqual(['one', 'two'])
    expect(await b.locator('pre code').textContent()).toBe('let x = 1\n')
    // The HTML shows as text; nothing of it became an element or ran.
    expect(await b.locator('script, img').count()).toBe(0)
    expect(await b.textContent()).toContain('<script>window.__pwned = 1</script>')
    const href = await b.locator('a').getAttribute('href')
    expect(href ?? '').not.toContain('javascript')
    expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined()
    // The user's own message stays plain text.
    expect(await page.getByTestId('msg').first().locator('strong').count()).toBe(0)

    // Copy a code block, then the whole answer.
    await b.getByTestId('copy-code').click()
    await expect.poll(() => b.getByTestId('copy-code').textContent()).toBe('Copied')
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe('let x = 1\n')
    await lastAssistant(page).getByTestId('copy-answer').click()
    await expect.poll(() => page.evaluate(() => navigator.clipboard.readText())).toMatch(/^echo: \*\*what\*\* and `code`/)
    expect(errors).toEqual([])
    await ctx.close()
  })

  it('saves with Ctrl+S from inside a field, opens the shortcut sheet with ?, searches the palette', async () => {
    const { page, ctx, errors } = await newPage(browser!)
    const gid = await createGraph(url, basicGraph({ name: 'keys' }))
    await open(page, url, `g=${gid}`)
    await expect.poll(() => page.locator('.react-flow__node').count()).toBe(4)
    // Loaded from the URL, fitted clear of the overlays.
    await expect.poll(() => expectClearOfOverlays(page).then(() => true, () => false)).toBe(true)
    const canvasTop = (await page.getByTestId('canvas').boundingBox())!.y

    // Ctrl+S while the cursor is in a field of the side panel.
    await selectNode(page, 'agent')
    await page.locator('#field-systemPrompt').fill('Be brief.')
    await page.locator('#field-systemPrompt').press('Control+s')
    await expect.poll(() => page.getByTestId('notice').textContent()).toContain('Saved v2')
    expect(await page.locator('#field-systemPrompt').evaluate((el) => el === document.activeElement)).toBe(true)
    const g = (await (await fetch(`${url}/api/v1/graphs/${gid}`)).json()) as { nodes: { id: string; data: Record<string, unknown> }[] }
    expect(g.nodes.find((n) => n.id === 'agent')!.data.systemPrompt).toBe('Be brief.')
    // The notice floats: the canvas did not move down.
    expect((await page.getByTestId('canvas').boundingBox())!.y).toBe(canvasTop)

    // The side panel is docked beside the canvas, resizes, and Esc closes it.
    const panel = page.getByTestId('side-panel')
    const pb = (await panel.boundingBox())!
    const cb = (await page.getByTestId('canvas').boundingBox())!
    expect(pb.x).toBeGreaterThanOrEqual(cb.x + cb.width - 1)
    const grip = (await page.getByTestId('panel-resize').boundingBox())!
    await page.mouse.move(grip.x + grip.width / 2, grip.y + 100)
    await page.mouse.down()
    await page.mouse.move(grip.x - 80, grip.y + 100, { steps: 4 })
    await page.mouse.up()
    await expect.poll(async () => (await panel.boundingBox())!.width).toBeGreaterThan(pb.width + 60)
    await page.locator('#field-systemPrompt').focus()
    await page.keyboard.press('Escape')
    await panel.waitFor({ state: 'detached' })

    // ? opens the sheet (not while typing), Esc closes it.
    await page.getByLabel('message', { exact: true }).focus()
    await page.keyboard.press('?')
    expect(await page.getByTestId('shortcut-sheet').count()).toBe(0)
    await page.locator('.react-flow__pane').click({ position: { x: 5, y: 5 } })
    await page.keyboard.press('?')
    await page.getByTestId('shortcut-sheet').waitFor()
    expect(await page.getByTestId('shortcut-sheet').textContent()).toContain('Save the graph (also while typing in a field)')
    await page.keyboard.press('Escape')
    await page.getByTestId('shortcut-sheet').waitFor({ state: 'detached' })

    // / searches the palette; Enter adds the first match.
    await page.keyboard.press('/')
    await page.keyboard.type('appr')
    await expect.poll(() => page.locator('.palette-item').count()).toBeLessThan(4)
    expect(await page.locator('.palette-item').first().textContent()).toContain('Approval')
    await page.keyboard.press('Enter')
    await expect.poll(() => page.locator('.react-flow__node[data-id="approval_1"]').count()).toBe(1)
    await expect.poll(() => page.locator('.palette-item').count()).toBeGreaterThan(5)
    expect(errors).toEqual([])
    await ctx.close()
  })

  it('drops a node where the pointer lets go, without moving the view', async () => {
    const { page, ctx, errors } = await newPage(browser!)
    await open(page, url)
    const canvas = (await page.getByTestId('canvas').boundingBox())!
    const viewport = () => page.locator('.react-flow__viewport').evaluate((e) => getComputedStyle(e).transform)
    const before = await viewport()
    await page.getByTestId('palette-agent').dragTo(page.getByTestId('canvas'), { targetPosition: { x: 120, y: 90 } })
    const node = page.locator('.react-flow__node[data-id="agent_1"]')
    await expect.poll(() => node.locator('.react-flow__handle').count()).toBe(4) // measured and drawn
    const b = (await node.boundingBox())!
    expect(Math.abs(b.x - (canvas.x + 120))).toBeLessThan(3)
    expect(Math.abs(b.y - (canvas.y + 90))).toBeLessThan(3)
    expect(await viewport()).toBe(before)
    expect(errors).toEqual([])
    await ctx.close()
  })

  it('keeps diagnostics current after every edit, undo and redo included, and names the field', async () => {
    const { page, ctx } = await newPage(browser!)
    await open(page, url)
    await page.getByRole('button', { name: 'Import' }).click()
    await page.getByLabel('graph json').fill(
      JSON.stringify({
        name: 'cycle',
        nodes: [
          { id: 's', type: 'chat_start', position: { x: 0, y: 0 } },
          { id: 'a', type: 'agent', position: { x: 300, y: 0 } },
          { id: 'b', type: 'agent', position: { x: 600, y: 0 } },
          { id: 't', type: 'template', position: { x: 900, y: 0 } },
          { id: 'o', type: 'chat_output', position: { x: 1200, y: 0 } },
        ],
        edges: [
          { id: 'e1', source: 's', sourceHandle: 'message', target: 'a', targetHandle: 'input', data: { channel: 'flow' } },
          { id: 'e2', source: 'a', sourceHandle: 'output', target: 'b', targetHandle: 'input', data: { channel: 'flow' } },
          { id: 'e3', source: 'b', sourceHandle: 'output', target: 'a', targetHandle: 'input', data: { channel: 'flow' } },
          { id: 'e4', source: 'b', sourceHandle: 'output', target: 't', targetHandle: 'input', data: { channel: 'flow' } },
          { id: 'e5', source: 't', sourceHandle: 'output', target: 'o', targetHandle: 'input', data: { channel: 'flow' } },
        ],
      }),
    )
    await page.getByTestId('import-dialog').getByRole('button', { name: 'Import' }).click()
    await page.getByTestId('save').click()
    await expect.poll(() => page.getByTestId('notice').textContent()).toContain('Not saved')
    await expect.poll(() => page.getByTestId('diag-node-a').textContent()).toMatch(/cycle/)
    // A field problem names the field, on the card and in the panel.
    await expect.poll(() => page.getByTestId('diag-node-t').textContent()).toBe('Template: required')
    await selectNode(page, 't')
    expect(await page.getByTestId('error-template').textContent()).toBe('Template: required')
    expect(await page.getByTestId('node-panel').textContent()).not.toContain('nodes[')
    await page.keyboard.press('Escape')

    // Delete the back edge: the cycle goes away without Validate.
    await page.locator('.react-flow__edge[data-id="e3"] .react-flow__edge-interaction').click({ force: true })
    await page.getByTestId('edge-panel').waitFor()
    await page.keyboard.press('Delete')
    await expect.poll(() => page.getByTestId('diag-node-a').count()).toBe(0)
    expect(await page.getByTestId('diag-node-t').textContent()).toBe('Template: required')
    // Undo brings the edge and its cycle back; redo removes both again.
    await page.keyboard.press('Control+z')
    await expect.poll(() => page.locator('.react-flow__edge[data-id="e3"]').count()).toBe(1)
    await expect.poll(() => page.getByTestId('diag-node-a').textContent()).toMatch(/cycle/)
    await page.keyboard.press('Control+Shift+z')
    await expect.poll(() => page.getByTestId('diag-node-a').count()).toBe(0)
    // Filling the template in clears its message too.
    await selectNode(page, 't')
    await page.locator('#field-template').fill('{{.content}}')
    await expect.poll(() => page.getByTestId('diag-node-t').count()).toBe(0)
    await ctx.close()
  })

  it('never draws two edge labels on top of each other', async () => {
    const { page, ctx } = await newPage(browser!)
    const gid = await createGraph(url, {
      name: 'labels',
      nodes: [
        { id: 's', type: 'chat_start', position: { x: 0, y: 0 }, data: {} },
        { id: 'r', type: 'router', position: { x: 250, y: 0 }, data: {} },
        { id: 'o', type: 'chat_output', position: { x: 650, y: 0 }, data: { join: 'any' } },
      ],
      edges: [
        { id: 'e1', source: 's', sourceHandle: 'message', target: 'r', targetHandle: 'input', data: { channel: 'flow' } },
        { id: 'c1', source: 'r', sourceHandle: 'output', target: 'o', targetHandle: 'input', data: { channel: 'flow', condition: 'output.content.contains("a")' } },
        { id: 'c2', source: 'r', sourceHandle: 'output', target: 'o', targetHandle: 'input', data: { channel: 'flow', condition: '!output.content.contains("a")' } },
        { id: 'c3', source: 'r', sourceHandle: 'output', target: 'o', targetHandle: 'input', data: { channel: 'flow', when: 'always' } },
      ],
    })
    await open(page, url, `g=${gid}`)
    await expect.poll(() => page.locator('.edge-label').count()).toBe(3)
    // The three edges share one path; their labels still stand apart.
    await expect
      .poll(async () => {
        const ls = await boxes(page, '.edge-label')
        return ls.every((a, i) => ls.every((b, j) => i === j || !overlaps(a, b)))
      })
      .toBe(true)
    await ctx.close()
  })

  it('follows the system colour scheme, and the toggle overrides it', async () => {
    const { page, ctx, errors } = await newPage(browser!)
    await page.emulateMedia({ colorScheme: 'dark' })
    await open(page, url)
    const theme = () => page.evaluate(() => document.documentElement.dataset.theme)
    const bg = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor)
    const dark = (c: string) => {
      const [r, g, b] = c.match(/\d+/g)!.map(Number)
      return 0.2126 * r + 0.7152 * g + 0.0722 * b < 60
    }
    await expect.poll(theme).toBe('dark')
    expect(dark(await bg())).toBe(true)
    expect(await page.locator('.react-flow').getAttribute('class')).toContain('dark')
    // The system turns light: so does the page.
    await page.emulateMedia({ colorScheme: 'light' })
    await expect.poll(theme).toBe('light')
    expect(dark(await bg())).toBe(false)
    // The toggle: auto -> light -> dark, kept across a reload.
    await page.getByTestId('theme-toggle').click()
    await expect.poll(() => page.getByTestId('theme-toggle').getAttribute('data-mode')).toBe('light')
    await page.getByTestId('theme-toggle').click()
    await expect.poll(theme).toBe('dark')
    await page.reload()
    await page.getByTestId('palette').waitFor()
    await expect.poll(theme).toBe('dark')
    expect(dark(await bg())).toBe(true)
    await screenshot(page, 'dark')
    expect(errors).toEqual([])
    await ctx.close()
  })
})
