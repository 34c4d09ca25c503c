import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { basicGraph, close, haveChromium, lastAssistant, launch, newPage, open } from './browser'
import { startServer, type RunningServer } from './server'

let browser: Browser | undefined
let server: RunningServer | undefined

async function post<T>(path: string, body: unknown, headers: Record<string, string> = {}): Promise<{ data: T; res: Response }> {
  const res = await fetch(`${server!.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  })
  if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`)
  return { data: (await res.json()) as T, res }
}

// Lists and chats longer than one page: the UI follows Link rel="next"
// (its own server, without the rate limit, to make them quickly).
describe.skipIf(!haveChromium)('pages', () => {
  beforeAll(async () => {
    ;[browser, server] = await Promise.all([launch(), startServer(inject('serverBin'), ['--rate-limit', '-1'])])
  })
  afterAll(async () => {
    await close(browser)
    await server?.stop()
  })

  it('lists every chat of a graph, past the first page of 1000', async () => {
    const { data: g } = await post<{ id: string }>('/api/v1/graphs', basicGraph({ name: 'many chats' }))
    const n = 1003
    for (let i = 0; i < n; i += 50) {
      await Promise.all(
        Array.from({ length: Math.min(50, n - i) }, (_, j) => post('/api/v1/chats', { graphId: g.id, title: `chat ${String(i + j).padStart(4, '0')}` })),
      )
    }
    const { page, ctx } = await newPage(browser!)
    await open(page, server!.url, `g=${g.id}`)
    // The chat select: one option per chat, plus the "new chat" entry.
    await expect.poll(() => page.getByTestId('chat-select').locator('option').count(), { timeout: 20_000 }).toBe(n + 1)
    await expect.poll(() => page.getByTestId('chat-select').locator('option', { hasText: 'chat 0000' }).count()).toBe(1)
    await ctx.close()
  })

  it('shows a chat of more than 1000 messages whole: its answer, at the end of the branch', async () => {
    const { data: g } = await post<{ id: string }>('/api/v1/graphs', basicGraph({ name: 'long chat' }))
    // An OpenAI-compatible call writes its transcript as the chat's history.
    const transcript = Array.from({ length: 1200 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `m${i}` }))
    const { res } = await post('/v1/chat/completions', { model: g.id, messages: [...transcript, { role: 'user', content: 'the last one' }] })
    const chatId = res.headers.get('X-Chatgraph-Chat-Id')!
    const chat = (await (await fetch(`${server!.url}/api/v1/chats/${chatId}`)).json()) as { messages: unknown[]; messagesCursor?: string }
    expect(chat.messages).toHaveLength(1000)
    expect(chat.messagesCursor).toBeTruthy()

    const { page, ctx } = await newPage(browser!)
    await open(page, server!.url, `g=${g.id}&c=${chatId}`)
    await expect.poll(() => lastAssistant(page).getByTestId('msg-body').textContent(), { timeout: 20_000 }).toBe('echo: the last one')
    await expect.poll(() => page.locator('[data-testid="msg"]').count()).toBe(1202)
    await ctx.close()
  })
})
