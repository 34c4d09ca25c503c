import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { basicGraph, close, haveChromium, lastAssistant, launch, newPage, send } from './browser'
import { startServer, type RunningServer } from './server'

let browser: Browser | undefined
let server: RunningServer | undefined

describe.skipIf(!haveChromium)('a server with CHATGRAPH_TOKEN', () => {
  beforeAll(async () => {
    ;[browser, server] = await Promise.all([launch(), startServer(inject('serverBin'), [], { CHATGRAPH_TOKEN: 's3cret' })])
  })
  afterAll(async () => {
    await close(browser)
    await server?.stop()
  })

  it('asks for the token, then uses it for HTTP and the WebSocket', async () => {
    const { page, ctx } = await newPage(browser!)
    const r = await fetch(`${server!.url}/api/v1/graphs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer s3cret' },
      body: JSON.stringify(basicGraph()),
    })
    const gid = ((await r.json()) as { id: string }).id
    await page.goto(`${server!.url}/#g=${gid}`)
    const ask = page.getByText('This server needs a token')
    await ask.waitFor()
    await page.locator('.notice input[type=password]').fill('s3cret')
    await page.locator('.notice input[type=password]').press('Enter')
    await page.getByTestId('palette-agent').waitFor()
    await expect.poll(() => page.getByTestId('socket-status').getAttribute('data-status')).toBe('open')
    await expect.poll(() => page.locator('.react-flow__node').count()).toBe(4)
    await send(page, 'with a token')
    await expect.poll(() => lastAssistant(page).getByTestId('msg-body').textContent(), { timeout: 10_000 }).toBe('echo: with a token')
    await ctx.close()
  })

  it('takes ?token= from the URL once, keeps it in sessionStorage and drops it from the address bar', async () => {
    const { page, ctx } = await newPage(browser!)
    await page.goto(`${server!.url}/?token=s3cret`)
    await page.getByTestId('palette-agent').waitFor()
    await expect.poll(() => page.getByTestId('socket-status').getAttribute('data-status')).toBe('open')
    expect(page.url()).not.toContain('token')
    expect(await page.evaluate(() => sessionStorage.getItem('chatgraph.token'))).toBe('s3cret')
    expect(await page.evaluate(() => localStorage.getItem('chatgraph.token'))).toBeNull()
    const res = await page.request.get(`${server!.url}/`)
    expect(res.headers()['content-security-policy']).toContain("frame-ancestors 'none'")
    expect(res.headers()['x-content-type-options']).toBe('nosniff')
    await ctx.close()
  })
})
