// Helpers of the browser tests: one Chromium per test file, a fresh
// context per test, and the gestures a person makes in the editor.
import { existsSync, mkdirSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core'
import { expect } from 'vitest'

export const chromiumPath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
export const artifacts = resolve(import.meta.dirname, '..', 'test-results')

/** Chromium is required on CI (CI=true); elsewhere its absence skips the browser tests. */
export const haveChromium = existsSync(chromiumPath)
if (!haveChromium && process.env.CI) throw new Error(`no Chromium at ${chromiumPath}: apt-get install -y chromium`)

export async function launch(): Promise<Browser> {
  // playwright's launch() refuses --user-data-dir: it always starts
  // Chromium on a fresh temporary profile of its own (and deletes it on
  // close), which is what the flag would give.
  return chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  })
}

export async function close(b: Browser | undefined) {
  await b?.close()
}

export async function newPage(b: Browser): Promise<{ ctx: BrowserContext; page: Page; errors: string[] }> {
  const ctx = await b.newContext({ viewport: { width: 1500, height: 920 } })
  const page = await ctx.newPage()
  const errors: string[] = []
  page.on('pageerror', (e) => errors.push(String(e)))
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(m.text())
  })
  page.setDefaultTimeout(15_000)
  return { ctx, page, errors }
}

export interface Box {
  x: number
  y: number
  width: number
  height: number
}

export function overlaps(a: Box, b: Box): boolean {
  return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height
}

/** The on-screen boxes of the elements a locator matches. */
export async function boxes(page: Page, selector: string): Promise<(Box & { id: string })[]> {
  return page.locator(selector).evaluateAll((els) =>
    els.map((e) => {
      const r = e.getBoundingClientRect()
      return { id: e.getAttribute('data-id') ?? e.getAttribute('data-testid') ?? '', x: r.x, y: r.y, width: r.width, height: r.height }
    }),
  )
}

export async function screenshot(page: Page, name: string) {
  mkdirSync(artifacts, { recursive: true })
  const file = join(artifacts, `${name}.png`)
  await page.screenshot({ path: file })
  return file
}

// ---- API shortcuts (set-up only; what is under test goes through the UI)

export interface WireGraph {
  name?: string
  nodes: { id: string; type: string; position?: { x: number; y: number }; data?: Record<string, unknown> }[]
  edges: { id: string; source: string; sourceHandle?: string; target: string; targetHandle?: string; data?: Record<string, unknown> }[]
}

export async function createGraph(url: string, g: WireGraph): Promise<string> {
  const r = await fetch(`${url}/api/v1/graphs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(g) })
  const body = (await r.json()) as { id: string }
  if (!r.ok) throw new Error(`create graph: ${r.status} ${JSON.stringify(body)}`)
  return body.id
}

/** chat_start -> agent -> chat_output, a tool linked to the agent. */
export function basicGraph(opts: { tokenDelayMs?: number; requireApproval?: boolean; name?: string } = {}): WireGraph {
  return {
    name: opts.name ?? 'basic',
    nodes: [
      { id: 'start', type: 'chat_start', position: { x: 0, y: 0 }, data: {} },
      { id: 'agent', type: 'agent', position: { x: 300, y: 0 }, data: { name: 'Helper', tokenDelayMs: opts.tokenDelayMs ?? 0 } },
      { id: 'calc', type: 'tool', position: { x: 0, y: 200 }, data: { name: 'calculator', requireApproval: opts.requireApproval ?? false } },
      { id: 'out', type: 'chat_output', position: { x: 600, y: 0 }, data: {} },
    ],
    edges: [
      { id: 'e1', source: 'start', sourceHandle: 'message', target: 'agent', targetHandle: 'input', data: { channel: 'flow' } },
      { id: 'e2', source: 'agent', sourceHandle: 'output', target: 'out', targetHandle: 'input', data: { channel: 'flow' } },
      { id: 'e3', source: 'calc', sourceHandle: 'tool', target: 'agent', targetHandle: 'tools', data: { channel: 'link' } },
    ],
  }
}

// ---- gestures

export async function open(page: Page, url: string, hash = '') {
  await page.goto(`${url}/${hash ? `#${hash}` : ''}`)
  await page.getByTestId('palette').locator('.palette-item').first().waitFor()
  await expect.poll(() => page.getByTestId('socket-status').getAttribute('data-status')).toBe('open')
}

export async function addNode(page: Page, type: string): Promise<string> {
  const before = await page.locator('.react-flow__node').evaluateAll((els) => els.map((e) => e.getAttribute('data-id')))
  await page.getByTestId(`palette-${type}`).click()
  await expect.poll(() => page.locator('.react-flow__node').count()).toBe(before.length + 1)
  const after = await page.locator('.react-flow__node').evaluateAll((els) => els.map((e) => e.getAttribute('data-id')))
  return after.find((id) => !before.includes(id))!
}

export async function moveNode(page: Page, id: string, dx: number, dy: number) {
  const head = page.locator(`.react-flow__node[data-id="${id}"] .node-head`)
  const b = (await head.boundingBox())!
  await page.mouse.move(b.x + 20, b.y + b.height / 2)
  await page.mouse.down()
  await page.mouse.move(b.x + 20 + dx / 2, b.y + b.height / 2 + dy / 2, { steps: 4 })
  await page.mouse.move(b.x + 20 + dx, b.y + b.height / 2 + dy, { steps: 4 })
  await page.mouse.up()
}

/**
 * Drags from one handle to another, as a person draws an edge (from a
 * node's output to an input, unless `kinds` says otherwise).
 */
export async function connect(
  page: Page,
  source: string,
  sourceHandle: string,
  target: string,
  targetHandle: string,
  kinds: { from: 'source' | 'target'; to: 'source' | 'target' } = { from: 'source', to: 'target' },
) {
  const s = page.locator(`.react-flow__handle[data-nodeid="${source}"][data-handleid="${sourceHandle}"].${kinds.from}`)
  const t = page.locator(`.react-flow__handle[data-nodeid="${target}"][data-handleid="${targetHandle}"].${kinds.to}`)
  const sb = (await s.boundingBox())!
  const tb = (await t.boundingBox())!
  await page.mouse.move(sb.x + sb.width / 2, sb.y + sb.height / 2)
  await page.mouse.down()
  await page.mouse.move((sb.x + tb.x) / 2, (sb.y + tb.y) / 2, { steps: 5 })
  await page.mouse.move(tb.x + tb.width / 2, tb.y + tb.height / 2, { steps: 5 })
  await page.mouse.up()
}

export async function selectNode(page: Page, id: string) {
  await page.locator(`.react-flow__node[data-id="${id}"] .node-head`).click()
  await page.getByTestId('node-panel').waitFor()
}

export async function save(page: Page) {
  await page.getByTestId('save').click()
}

export async function send(page: Page, text: string) {
  await page.getByLabel('message', { exact: true }).fill(text)
  await page.getByTestId('send').click()
}

export function messages(page: Page) {
  return page.getByTestId('msg')
}

export function lastAssistant(page: Page) {
  return page.locator('[data-testid="msg"][data-role="assistant"]').last()
}
