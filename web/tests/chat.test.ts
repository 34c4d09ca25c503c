import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { basicGraph, close, createGraph, haveChromium, lastAssistant, launch, newPage, open, screenshot, send } from './browser'

const url = inject('serverUrl')
let browser: Browser | undefined

const body = (page: Page) => lastAssistant(page).getByTestId('msg-body')
const status = (page: Page) => lastAssistant(page).getAttribute('data-status')
const hash = async (page: Page) => new URLSearchParams((await page.evaluate(() => location.hash)).slice(1))

/** The events the page's run store applied for a run: gap-free and unique? */
async function runStats(page: Page, runId: string) {
  return page.evaluate((id) => {
    const r = window.__chatgraph!.runStore.getState().runs[id]
    return {
      lastSeq: r.lastSeq,
      seqs: r.events.map((e) => e.seq),
      buffered: Object.keys(r.buffered).length,
      deltas: r.events.filter((e) => e.type === 'node_delta').length,
      status: r.status,
    }
  }, runId)
}

describe.skipIf(!haveChromium)('chat', () => {
  beforeAll(async () => {
    browser = await launch()
  })
  afterAll(async () => close(browser))

  it('stops a run before its first event, stops one mid-stream and continues it', async () => {
    const { page, ctx, errors } = await newPage(browser!)
    // Hold chat frames on their way to the server while `hold` is set, so
    // the Stop press reaches the server before the run even exists.
    let hold = false
    const held: string[] = []
    let toServer: ((m: string) => void) | undefined
    const fromServer: { type: string; status?: string }[] = []
    await page.routeWebSocket(/\/api\/v1\/ws/, (ws) => {
      const server = ws.connectToServer()
      toServer = (m) => server.send(m)
      server.onMessage((m) => {
        fromServer.push(JSON.parse(String(m)))
        ws.send(m)
      })
      ws.onMessage((m) => {
        const f = JSON.parse(String(m)) as { type: string }
        if (hold && f.type === 'stream_chat') held.push(String(m))
        else server.send(m)
      })
    })
    const gid = await createGraph(url, basicGraph({ tokenDelayMs: 250 }))
    await open(page, url, `g=${gid}`)

    hold = true
    await send(page, 'never streamed')
    await expect.poll(() => held.length).toBe(1)
    await page.getByTestId('stop').click()
    // The cancel went ahead (answered "pending": no run yet); now the chat call.
    await expect.poll(() => fromServer.some((f) => f.type === 'ack' && f.status === 'pending')).toBe(true)
    hold = false
    toServer!(held[0])
    await expect.poll(() => status(page), { timeout: 10_000 }).toBe('cancelled')
    expect(await body(page).textContent()).toBe('')
    const chat1 = (await (await fetch(`${url}/api/v1/chats/${(await hash(page)).get('c')}`)).json()) as { messages: { runId: string; role: string }[] }
    const run1 = chat1.messages.find((m) => m.role === 'assistant')!.runId
    const ev1 = await (await fetch(`${url}/api/v1/runs/${run1}/events`, { headers: { accept: 'text/event-stream' } })).text()
    expect(ev1).toContain('event: run_cancelled')
    expect(ev1).not.toContain('node_delta')

    // Mid-stream: Stop after the first words, then Continue.
    await send(page, 'alpha beta gamma delta epsilon zeta eta theta')
    await expect.poll(() => body(page).textContent(), { timeout: 10_000 }).toMatch(/^echo: alpha/)
    await page.getByTestId('stop').click()
    await expect.poll(() => status(page), { timeout: 10_000 }).toBe('cancelled')
    // Said in words; the code is in the tooltip.
    expect(await lastAssistant(page).getByTestId('msg-error').textContent()).toBe('You stopped this answer.')
    expect(await lastAssistant(page).getByTestId('msg-error').getAttribute('title')).toBe('user_cancel')
    expect(await lastAssistant(page).getByTestId('msg-status').textContent()).toBe('Stopped')
    const partial = (await body(page).textContent())!
    expect(partial.length).toBeLessThan('echo: alpha beta gamma delta epsilon zeta eta theta'.length)
    await lastAssistant(page).getByRole('button', { name: 'Continue' }).click()
    await expect.poll(() => status(page), { timeout: 15_000 }).toBe('completed')
    expect(await body(page).textContent()).toBe('echo: alpha beta gamma delta epsilon zeta eta theta')
    // The continued run replayed chat_start: "Reused", never a raw REPLAYED.
    await expect.poll(() => page.getByTestId('node-start').getAttribute('data-status')).toBe('replayed')
    expect(await page.getByTestId('status-start').textContent()).toBe('Reused')
    expect(await page.getByTestId('status-start').evaluate((e) => (e as HTMLElement).innerText)).toBe('Reused')
    expect(errors).toEqual([])
    await ctx.close()
  })

  it('takes a message back: the run stops and its turn leaves the chat', async () => {
    const { page, ctx, errors } = await newPage(browser!)
    const gid = await createGraph(url, basicGraph({ tokenDelayMs: 250 }))
    await open(page, url, `g=${gid}`)
    await send(page, 'kept')
    await expect.poll(() => status(page), { timeout: 10_000 }).toBe('completed')

    await send(page, 'taken back before its end')
    await expect.poll(() => body(page).textContent(), { timeout: 10_000 }).toMatch(/^echo: taken/)
    const chatId = (await hash(page)).get('c')
    const during = (await (await fetch(`${url}/api/v1/chats/${chatId}`)).json()) as { messages: { runId: string; role: string }[] }
    expect(during.messages).toHaveLength(4)
    const runId = during.messages[3].runId
    await page.getByTestId('take-back').click()
    // The chat shows the turn before it, as the server holds it.
    await expect.poll(() => page.getByTestId('msg-body').count(), { timeout: 10_000 }).toBe(2)
    expect(await body(page).textContent()).toBe('echo: kept')
    const after = (await (await fetch(`${url}/api/v1/chats/${chatId}`)).json()) as { messages: unknown[] }
    expect(after.messages).toHaveLength(2)
    expect((await fetch(`${url}/api/v1/runs/${runId}`)).status).toBe(404)
    await expect.poll(() => page.getByTestId('take-back').count()).toBe(0)
    expect(errors).toEqual([])
    await ctx.close()
  })

  it('asks for approval: approve, then deny', async () => {
    const { page, ctx, errors } = await newPage(browser!)
    const gid = await createGraph(url, basicGraph({ requireApproval: true }))
    await open(page, url, `g=${gid}`)

    await send(page, '/tool calculator {"expression":"6*7"}')
    const card = lastAssistant(page).getByTestId('approval-card')
    await expect.poll(() => card.textContent(), { timeout: 10_000 }).toContain('calculator({"expression":"6*7"})')
    expect(await status(page)).toBe('interrupted')
    await expect.poll(() => page.getByTestId('node-agent').getAttribute('data-status')).toBe('interrupted')
    await screenshot(page, 'approval')
    await card.getByRole('button', { name: 'Approve' }).click()
    await expect.poll(() => status(page), { timeout: 10_000 }).toBe('completed')
    expect(await body(page).textContent()).toBe('tool calculator returned: 42')
    expect(await lastAssistant(page).getByTestId('approval-card').count()).toBe(0)
    // The decision stays in the transcript, with the call's arguments.
    const approved = lastAssistant(page).getByTestId('approval-record')
    await expect.poll(() => approved.getAttribute('data-approved')).toBe('true')
    expect(await approved.textContent()).toContain('You approved calculator({"expression":"6*7"})')

    await send(page, '/tool calculator {"expression":"1+1"}')
    const card2 = lastAssistant(page).getByTestId('approval-card')
    await expect.poll(() => card2.textContent(), { timeout: 10_000 }).toContain('1+1')
    await card2.getByPlaceholder('reason').fill('not now')
    await card2.getByRole('button', { name: 'Deny' }).click()
    await expect.poll(() => status(page), { timeout: 10_000 }).toBe('completed')
    expect(await body(page).textContent()).toBe('tool calculator returned: error: the user refused this call: not now')
    const denied = lastAssistant(page).getByTestId('approval-record')
    await expect.poll(() => denied.getAttribute('data-approved')).toBe('false')
    expect(await denied.textContent()).toContain('You denied calculator({"expression":"1+1"}) — “not now”')
    // The denied call keeps its arguments in the tool list too.
    expect(await lastAssistant(page).getByTestId('tool-call').textContent()).toContain('calculator({"expression":"1+1"})')

    // After a reload (nothing in memory) both decisions are still there.
    await page.reload()
    await expect.poll(() => page.getByTestId('approval-record').count(), { timeout: 10_000 }).toBe(2)
    expect(await page.getByTestId('approval-record').allTextContents()).toEqual([
      '✔ You approved calculator({"expression":"6*7"})',
      '✘ You denied calculator({"expression":"1+1"}) — “not now”',
    ])
    expect(errors).toEqual([])
    await ctx.close()
  })

  it('retries and edits into branches with < n/m > navigation; targets one agent', async () => {
    const { page, ctx, errors } = await newPage(browser!)
    const gid = await createGraph(url, basicGraph())
    await open(page, url, `g=${gid}`)
    const nav = (i: number) => page.getByTestId('msg').nth(i).getByTestId('branch-nav')

    await send(page, 'first')
    await expect.poll(() => status(page), { timeout: 10_000 }).toBe('completed')
    await lastAssistant(page).getByRole('button', { name: 'Retry' }).click()
    await expect.poll(() => nav(1).textContent()).toContain('2/2')
    await expect.poll(() => status(page), { timeout: 10_000 }).toBe('completed')
    await lastAssistant(page).getByRole('button', { name: 'Retry' }).click()
    await expect.poll(() => nav(1).textContent()).toContain('3/3')
    await expect.poll(() => status(page), { timeout: 10_000 }).toBe('completed')
    expect(await body(page).textContent()).toBe('echo: first')
    await nav(1).getByLabel('previous branch').click()
    await expect.poll(() => nav(1).textContent()).toContain('2/3')

    // Edit the user message: a sibling user message with its own answer.
    const user = page.getByTestId('msg').first()
    await user.getByRole('button', { name: 'Edit' }).click()
    await user.getByLabel('edit message').fill('second')
    await user.getByRole('button', { name: 'Save & send' }).click()
    await expect.poll(() => nav(0).textContent()).toContain('2/2')
    await expect.poll(() => body(page).textContent(), { timeout: 10_000 }).toBe('echo: second')
    await expect.poll(() => status(page)).toBe('completed')
    await nav(0).getByLabel('previous branch').click()
    await expect.poll(() => page.getByTestId('msg').first().getByTestId('msg-body').textContent()).toBe('first')
    await expect.poll(() => nav(1).textContent()).toContain('/3')
    // The server keeps the branch shown.
    const chat = (await (await fetch(`${url}/api/v1/chats/${(await hash(page)).get('c')}`)).json()) as {
      activeLeafId: string
      messages: { id: string; parentId: string | null; content: string }[]
    }
    const leaf = chat.messages.find((m) => m.id === chat.activeLeafId)!
    expect(chat.messages.find((m) => m.id === leaf.parentId)!.content).toBe('first')

    // stream_agent_chat: the agent is the entry, chat_start does not run.
    await page.getByTestId('target-select').selectOption('agent')
    await send(page, 'just the agent')
    await expect.poll(() => body(page).textContent(), { timeout: 10_000 }).toBe('echo: just the agent')
    await expect.poll(() => status(page)).toBe('completed')
    await expect.poll(() => page.getByTestId('node-agent').getAttribute('data-status')).toBe('completed')
    expect(await page.getByTestId('status-start').count()).toBe(0)
    await screenshot(page, 'branches')
    expect(errors).toEqual([])
    await ctx.close()
  })

  it('completes an answer exactly once across a reload and a dropped connection', async () => {
    const { page, ctx, errors } = await newPage(browser!)
    const gid = await createGraph(url, basicGraph({ tokenDelayMs: 150 }))
    await open(page, url, `g=${gid}`)
    const words = 'one two three four five six seven eight nine ten eleven twelve'
    await send(page, words)
    await expect.poll(() => body(page).textContent(), { timeout: 10_000 }).toMatch(/^echo: one two/)
    expect(await status(page)).toBe('running')
    await page.reload()
    await page.getByTestId('msg').first().waitFor()
    await expect.poll(() => body(page).textContent(), { timeout: 15_000 }).toBe(`echo: ${words}`)
    await expect.poll(() => status(page)).toBe('completed')
    const runId = (await page.evaluate(() => Object.keys(window.__chatgraph!.runStore.getState().runs)))[0]
    let st = await runStats(page, runId)
    expect(st.seqs).toEqual(Array.from({ length: st.lastSeq }, (_, i) => i + 1))
    expect(st.deltas).toBe(13) // "echo:" + 12 words, each once

    // Drop the WebSocket mid-stream: it reconnects and resubscribes after the last seq.
    await send(page, words)
    await expect.poll(() => lastAssistant(page).getAttribute('data-status')).toBe('running')
    await expect.poll(() => body(page).textContent(), { timeout: 10_000 }).toMatch(/^echo: one two/)
    const opens = await page.evaluate(() => window.__chatgraph!.socket.opens)
    await page.evaluate(() => window.__chatgraph!.socket.drop())
    await expect.poll(() => page.evaluate(() => window.__chatgraph!.socket.opens), { timeout: 10_000 }).toBe(opens + 1)
    await expect.poll(() => status(page), { timeout: 15_000 }).toBe('completed')
    expect(await body(page).textContent()).toBe(`echo: ${words}`)
    const run2 = await page.evaluate(() => {
      const runs = window.__chatgraph!.runStore.getState().runs
      return Object.keys(runs).find((id) => runs[id].messageId && runs[id].events.length > 0 && id !== Object.keys(runs)[0])!
    })
    st = await runStats(page, run2)
    expect(st.status).toBe('completed')
    expect(st.buffered).toBe(0)
    expect(st.seqs).toEqual(Array.from({ length: st.lastSeq }, (_, i) => i + 1))
    expect(st.deltas).toBe(13)
    // Both answers shown once each.
    const bodies = await page.locator('[data-testid="msg"][data-role="assistant"] [data-testid="msg-body"]').allTextContents()
    expect(bodies).toEqual([`echo: ${words}`, `echo: ${words}`])
    expect(errors).toEqual([])
    await ctx.close()
  })

  it('stops an answer after the WebSocket reconnected', async () => {
    const { page, ctx, errors } = await newPage(browser!)
    const gid = await createGraph(url, basicGraph({ tokenDelayMs: 200 }))
    await open(page, url, `g=${gid}`)
    await send(page, 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen')
    await expect.poll(() => body(page).textContent(), { timeout: 10_000 }).toMatch(/^echo: one/)
    const opens = await page.evaluate(() => window.__chatgraph!.socket.opens)
    await page.evaluate(() => window.__chatgraph!.socket.drop())
    await expect.poll(() => page.evaluate(() => window.__chatgraph!.socket.opens), { timeout: 10_000 }).toBe(opens + 1)
    // The call went out on the old connection: the cancel names its chat too, so it reaches it.
    await page.getByTestId('stop').click()
    await expect.poll(() => status(page), { timeout: 10_000 }).toBe('cancelled')
    expect(await lastAssistant(page).getByTestId('msg-error').getAttribute('title')).toBe('user_cancel')
    await send(page, 'after')
    await expect.poll(() => body(page).textContent(), { timeout: 10_000 }).toBe('echo: after')
    await expect.poll(() => status(page)).toBe('completed')
    expect(errors).toEqual([])
    await ctx.close()
  })

  it('sends a message longer than a WebSocket frame, and gives back one the server refuses', async () => {
    const { page, ctx, errors } = await newPage(browser!)
    const gid = await createGraph(url, basicGraph())
    await open(page, url, `g=${gid}`)
    const opens = await page.evaluate(() => window.__chatgraph!.socket.opens)
    // 600 words of 120 characters: ~72 KB, over the server's 64 KiB frame
    // limit (a frame that big closes the WebSocket: 1009), under its
    // 200,000-character limit on content.
    const long = Array.from({ length: 600 }, (_, i) => `w${i}é`.padEnd(120, 'x')).join(' ')
    await send(page, long)
    await expect.poll(() => status(page), { timeout: 20_000 }).toBe('completed')
    const chatId = (await hash(page)).get('c')!
    const chat = (await (await fetch(`${url}/api/v1/chats/${encodeURIComponent(chatId)}`)).json()) as { messages: { role: string; content: string }[] }
    expect(chat.messages.map((m) => m.content)).toEqual([long, `echo: ${long}`])
    expect(await body(page).textContent()).toBe(`echo: ${long}`)
    // Over the content limit: refused in words, the text back in the composer.
    const tooLong = 'y'.repeat(200_001)
    await send(page, tooLong)
    await expect.poll(() => page.getByTestId('notice').textContent()).toBeTruthy()
    await expect.poll(() => page.getByLabel('message', { exact: true }).inputValue()).toBe(tooLong)
    expect(await page.getByTestId('msg').count()).toBe(2)
    // The connection never dropped.
    expect(await page.evaluate(() => window.__chatgraph!.socket.opens)).toBe(opens)
    expect(errors.filter((e) => !e.includes('400'))).toEqual([])
    await ctx.close()
  })

  it('shows failed, retried and skipped nodes and their detail', async () => {
    const { page, ctx, errors } = await newPage(browser!)
    const gid = await createGraph(url, {
      name: 'failing',
      nodes: [
        { id: 'start', type: 'chat_start', position: { x: 0, y: 0 }, data: {} },
        { id: 'wait', type: 'delay', position: { x: 300, y: 0 }, data: { ms: 600 } },
        { id: 'flaky', type: 'flaky', position: { x: 600, y: 0 }, data: { failTimes: 5, retry: { maxAttempts: 2, initialDelayMs: 10 } } },
        { id: 'out', type: 'chat_output', position: { x: 900, y: 0 }, data: {} },
      ],
      edges: [
        { id: 'e1', source: 'start', sourceHandle: 'message', target: 'wait', targetHandle: 'input', data: { channel: 'flow' } },
        { id: 'e2', source: 'wait', sourceHandle: 'output', target: 'flaky', targetHandle: 'input', data: { channel: 'flow' } },
        { id: 'e3', source: 'flaky', sourceHandle: 'output', target: 'out', targetHandle: 'input', data: { channel: 'flow' } },
      ],
    })
    await open(page, url, `g=${gid}`)
    await send(page, 'go')
    await expect.poll(() => page.getByTestId('node-wait').getAttribute('data-status')).toBe('running')
    expect(await page.getByTestId('node-wait').getAttribute('class')).toContain('status-running')
    expect(await page.getByTestId('node-flaky').getAttribute('data-status')).toBe('pending')
    await expect.poll(() => status(page), { timeout: 10_000 }).toBe('failed')
    await expect.poll(() => page.getByTestId('status-flaky').textContent()).toBe('Failed (try 2)')
    expect(await page.getByTestId('node-flaky').getAttribute('data-status')).toBe('failed')
    await expect.poll(() => page.getByTestId('node-out').getAttribute('data-status')).toBe('skipped')
    expect(await page.getByTestId('node-wait').getAttribute('data-status')).toBe('completed')
    await page.getByTestId('timeline').locator('tr', { hasText: 'node_retrying' }).first().click()
    const detail = page.getByTestId('node-detail')
    await expect.poll(() => detail.textContent()).toContain('retries')
    expect(await detail.textContent()).toContain('[flaky]')
    expect(await detail.textContent()).toContain('wait: {') // its input: the delay node's output
    expect(errors).toEqual([])
    await ctx.close()
  })
})
