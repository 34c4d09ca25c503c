// The UI behind a proxy that strips WebSocket upgrades: it falls back to
// HTTP for commands and SSE for events, with the same resume-from-last-seq.
import { createServer, request, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { basicGraph, close, createGraph, haveChromium, lastAssistant, launch, newPage, open, send } from './browser'

const url = inject('serverUrl')
let browser: Browser | undefined
let proxy: Server | undefined
let proxyUrl = ''
let upgrades = 0

const body = (page: Page) => lastAssistant(page).getByTestId('msg-body')
const status = (page: Page) => lastAssistant(page).getAttribute('data-status')

/** An HTTP proxy to the server that refuses every WebSocket upgrade. */
async function stripUpgrades(target: string): Promise<Server> {
  const t = new URL(target)
  const s = createServer((req, res) => {
    const up = request({ host: t.hostname, port: t.port, path: req.url, method: req.method, headers: { ...req.headers, host: t.host } }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers)
      r.pipe(res)
    })
    up.on('error', () => res.destroy())
    res.on('close', () => up.destroy())
    req.pipe(up)
  })
  s.on('upgrade', (_req, sock) => {
    upgrades++
    sock.destroy()
  })
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
  return s
}

describe.skipIf(!haveChromium)('no WebSocket: HTTP + SSE', () => {
  beforeAll(async () => {
    browser = await launch()
    proxy = await stripUpgrades(url)
    proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`
  })
  afterAll(async () => {
    await close(browser)
    await new Promise((r) => proxy?.close(r))
  })

  it('chats, stops and resumes a dropped stream after its last seq', async () => {
    const { page, ctx, errors } = await newPage(browser!)
    const gid = await createGraph(url, basicGraph({ tokenDelayMs: 150 }))
    await open(page, proxyUrl, `g=${gid}`)
    expect(await page.getByTestId('socket-status').getAttribute('data-mode')).toBe('sse')
    expect(upgrades).toBeGreaterThanOrEqual(2)
    expect(await page.evaluate(() => [window.__chatgraph!.socket.mode, window.__chatgraph!.socket.opens])).toEqual(['sse', 0])

    const words = 'one two three four five six seven eight nine ten eleven twelve'
    await send(page, words)
    await expect.poll(() => body(page).textContent(), { timeout: 10_000 }).toMatch(/^echo: one two/)
    // Drop every SSE stream mid-run: each reconnects after its last applied seq.
    await page.evaluate(() => window.__chatgraph!.socket.drop())
    await expect.poll(() => status(page), { timeout: 15_000 }).toBe('completed')
    expect(await body(page).textContent()).toBe(`echo: ${words}`)
    const st = await page.evaluate(() => {
      const runs = window.__chatgraph!.runStore.getState().runs
      const r = Object.values(runs).find((x) => x.events.length > 0)!
      return { seqs: r.events.map((e) => e.seq), lastSeq: r.lastSeq, deltas: r.events.filter((e) => e.type === 'node_delta').length }
    })
    expect(st.seqs).toEqual(Array.from({ length: st.lastSeq }, (_, i) => i + 1))
    expect(st.deltas).toBe(13) // "echo:" + 12 words, each once

    // Stop mid-stream goes over HTTP too.
    await send(page, 'alpha beta gamma delta epsilon zeta eta theta')
    await expect.poll(() => body(page).textContent(), { timeout: 10_000 }).toMatch(/^echo: alpha/)
    await page.getByTestId('stop').click()
    await expect.poll(() => status(page), { timeout: 10_000 }).toBe('cancelled')

    // Only the refused upgrades complain.
    expect(errors.filter((e) => !/WebSocket/.test(e))).toEqual([])
    await ctx.close()
  })

  it('asks for approval and continues over HTTP', async () => {
    const { page, ctx, errors } = await newPage(browser!)
    const gid = await createGraph(url, basicGraph({ requireApproval: true }))
    await open(page, proxyUrl, `g=${gid}`)
    expect(await page.getByTestId('socket-status').getAttribute('data-mode')).toBe('sse')
    await send(page, '/tool calculator {"expression":"6*7"}')
    const card = lastAssistant(page).getByTestId('approval-card')
    await expect.poll(() => card.textContent(), { timeout: 10_000 }).toContain('calculator({"expression":"6*7"})')
    await card.getByRole('button', { name: 'Approve' }).click()
    await expect.poll(() => status(page), { timeout: 10_000 }).toBe('completed')
    expect(await body(page).textContent()).toBe('tool calculator returned: 42')
    expect(errors.filter((e) => !/WebSocket/.test(e))).toEqual([])
    await ctx.close()
  })
})
