import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { addNode, basicGraph, close, createGraph, haveChromium, launch, newPage, open, save, screenshot, selectNode } from './browser'

const url = inject('serverUrl')
let browser: Browser | undefined

async function importJSON(page: Page, g: unknown) {
  await page.getByRole('button', { name: 'Import' }).click()
  await page.getByLabel('graph json').fill(JSON.stringify(g))
  await page.getByTestId('import-dialog').getByRole('button', { name: 'Import' }).click()
  await page.getByTestId('import-dialog').waitFor({ state: 'detached' })
}

const edgeEl = (page: Page, id: string) => page.locator(`.react-flow__edge[data-id="${id}"]`)

describe.skipIf(!haveChromium)('graphs', () => {
  beforeAll(async () => {
    browser = await launch()
  })
  afterAll(async () => close(browser))

  it('shows save diagnostics on the edges and nodes they are about', async () => {
    const { page, ctx } = await newPage(browser!)
    page.on('dialog', (d) => void d.accept()) // "discard unsaved changes?" on the second import
    await open(page, url)
    // No positions: the import lays the graph out. e1 has no channel, e4 a wrong one.
    await importJSON(page, {
      name: 'broken',
      nodes: [
        { id: 's', type: 'chat_start' },
        { id: 'a', type: 'agent' },
        { id: 'o', type: 'chat_output' },
      ],
      edges: [
        { id: 'e1', source: 's', sourceHandle: 'message', target: 'a', targetHandle: 'input', data: {} },
        { id: 'e4', source: 'a', sourceHandle: 'output', target: 'o', targetHandle: 'input', data: { channel: 'wire' } },
      ],
    })
    await expect.poll(() => page.locator('.react-flow__node').count()).toBe(3)
    const xs = await Promise.all(['s', 'a', 'o'].map(async (id) => (await page.locator(`.react-flow__node[data-id="${id}"]`).boundingBox())!.x))
    expect(xs[0]).toBeLessThan(xs[1]) // laid out left to right
    expect(xs[1]).toBeLessThan(xs[2])

    await save(page)
    await expect.poll(() => page.getByTestId('notice').textContent()).toContain('Not saved')
    await expect.poll(() => edgeEl(page, 'e1').getAttribute('class')).toContain('diag-error')
    await expect.poll(() => page.getByTestId('edge-label-e1').textContent()).toContain('Channel: required')
    await expect.poll(() => page.getByTestId('edge-label-e4').textContent()).toContain('not "wire"')
    expect(await page.evaluate(() => location.hash)).toBe('') // nothing saved

    // A cycle in the reachable part: the nodes on it carry the message.
    await importJSON(page, {
      name: 'cycle',
      nodes: [
        { id: 's', type: 'chat_start', position: { x: 0, y: 0 } },
        { id: 'a', type: 'agent', position: { x: 300, y: 0 } },
        { id: 'b', type: 'agent', position: { x: 600, y: 0 } },
        { id: 'o', type: 'chat_output', position: { x: 900, y: 0 } },
      ],
      edges: [
        { id: 'e1', source: 's', sourceHandle: 'message', target: 'a', targetHandle: 'input', data: { channel: 'flow' } },
        { id: 'e2', source: 'a', sourceHandle: 'output', target: 'b', targetHandle: 'input', data: { channel: 'flow' } },
        { id: 'e3', source: 'b', sourceHandle: 'output', target: 'a', targetHandle: 'input', data: { channel: 'flow' } },
        { id: 'e4', source: 'b', sourceHandle: 'output', target: 'o', targetHandle: 'input', data: { channel: 'flow' } },
      ],
    })
    await save(page)
    await expect.poll(() => page.getByTestId('notice').textContent()).toContain('Not saved')
    await expect.poll(() => page.getByTestId('diag-node-a').textContent()).toMatch(/cycle/)
    await expect.poll(() => page.getByTestId('diag-node-b').textContent()).toMatch(/cycle/)
    await expect.poll(() => page.locator('.node-card.diag-error').count()).toBeGreaterThanOrEqual(2)
    await expect.poll(() => edgeEl(page, 'e3').getAttribute('class')).toMatch(/diag-(error|warning)/)
    await screenshot(page, 'diagnostics')

    // Fix it (delete the back edge with the keyboard) and it saves.
    await edgeEl(page, 'e3').locator('.react-flow__edge-interaction').click({ force: true })
    await page.getByTestId('edge-panel').waitFor()
    await page.keyboard.press('Delete')
    await expect.poll(() => edgeEl(page, 'e3').count()).toBe(0)
    await save(page)
    await expect.poll(() => page.getByTestId('notice').textContent()).toContain('Saved v1')
    await expect.poll(() => page.locator('.node-card.diag-error').count()).toBe(0)
    await ctx.close()
  })

  it('edits edges, undoes and redoes, deletes with the keyboard', async () => {
    const { page, ctx } = await newPage(browser!)
    const gid = await createGraph(url, basicGraph({ name: 'edit me' }))
    await open(page, url, `g=${gid}`)
    await expect.poll(() => page.locator('.react-flow__node').count()).toBe(4)
    // Flow edges solid, link edges dashed.
    expect(await edgeEl(page, 'e1').getAttribute('class')).toContain('ch-flow')
    expect(await edgeEl(page, 'e3').getAttribute('class')).toContain('ch-link')
    const dash = (id: string) => edgeEl(page, id).locator('.react-flow__edge-path').evaluate((p) => getComputedStyle(p).strokeDasharray)
    expect(await dash('e1')).toBe('none')
    expect(await dash('e3')).not.toBe('none')

    // when and condition on a flow edge.
    await edgeEl(page, 'e2').locator('.react-flow__edge-interaction').click({ force: true })
    await page.getByTestId('edge-panel').waitFor()
    expect(await page.getByTestId('edge-channel').textContent()).toBe('flow')
    await page.locator('#edge-when').selectOption('always')
    await page.locator('#edge-condition').fill('output.content != ""')
    await expect.poll(() => page.getByTestId('edge-label-e2').textContent()).toBe('always · if output.content != ""')
    await save(page)
    await expect.poll(() => page.getByTestId('notice').textContent()).toContain('Saved v2')
    const g = (await (await fetch(`${url}/api/v1/graphs/${gid}`)).json()) as { edges: { id: string; data: unknown }[] }
    expect(g.edges.find((e) => e.id === 'e2')!.data).toEqual({ channel: 'flow', when: 'always', condition: 'output.content != ""' })

    // Delete a node with the keyboard: it and its edges go; undo brings them back; redo again.
    await selectNode(page, 'calc')
    await page.locator('.react-flow__pane').click({ position: { x: 5, y: 5 } })
    await page.locator('.react-flow__node[data-id="calc"]').click()
    await page.keyboard.press('Delete')
    await expect.poll(() => page.locator('.react-flow__node').count()).toBe(3)
    await expect.poll(() => edgeEl(page, 'e3').count()).toBe(0)
    await page.keyboard.press('Control+z')
    await expect.poll(() => page.locator('.react-flow__node').count()).toBe(4)
    await expect.poll(() => edgeEl(page, 'e3').count()).toBe(1)
    await page.getByTestId('redo').click()
    await expect.poll(() => page.locator('.react-flow__node').count()).toBe(3)
    await page.getByTestId('undo').click()
    await expect.poll(() => page.locator('.react-flow__node').count()).toBe(4)
    // Undo of a data edit: one typing burst is one step.
    await selectNode(page, 'agent')
    await page.locator('#field-systemPrompt').fill('Be brief.')
    await page.locator('.react-flow__pane').click({ position: { x: 5, y: 5 } })
    await page.keyboard.press('Control+z')
    await selectNode(page, 'agent')
    expect(await page.locator('#field-systemPrompt').inputValue()).toBe('')
    await ctx.close()
  })

  it('renames, duplicates, loads and deletes graphs', async () => {
    const { page, ctx } = await newPage(browser!)
    page.on('dialog', (d) => void d.accept())
    const gid = await createGraph(url, basicGraph({ name: 'original' }))
    await open(page, url, `g=${gid}`)
    await expect.poll(() => page.getByLabel('graph name').inputValue()).toBe('original')
    await page.getByLabel('graph name').fill('renamed')
    await save(page)
    await expect.poll(() => page.getByTestId('notice').textContent()).toContain('Saved v2')
    await expect.poll(() => page.getByTestId('graph-select').locator('option', { hasText: 'renamed' }).count()).toBe(1)

    await page.getByRole('button', { name: 'Duplicate' }).click()
    await expect.poll(() => page.getByLabel('graph name').inputValue()).toBe('renamed (copy)')
    const copyId = new URLSearchParams((await page.evaluate(() => location.hash)).slice(1)).get('g')
    expect(copyId).not.toBe(gid)
    await expect.poll(() => page.locator('.react-flow__node').count()).toBe(4)

    // Load the original from the list.
    await page.getByTestId('graph-select').selectOption(gid)
    await expect.poll(() => page.getByLabel('graph name').inputValue()).toBe('renamed')

    // Delete the copy.
    await page.getByTestId('graph-select').selectOption(copyId!)
    await expect.poll(() => page.getByLabel('graph name').inputValue()).toBe('renamed (copy)')
    await page.getByRole('button', { name: 'Delete', exact: true }).click()
    await expect.poll(() => page.getByTestId('notice').textContent()).toContain('Deleted')
    expect((await fetch(`${url}/api/v1/graphs/${copyId}`)).status).toBe(404)
    await expect.poll(() => page.getByTestId('graph-select').locator(`option[value="${copyId}"]`).count()).toBe(0)
    await expect.poll(() => page.locator('.react-flow__node').count()).toBe(0)

    // A new node from the palette gets the type's defaults.
    await addNode(page, 'delay')
    await selectNode(page, 'delay_1')
    expect(await page.locator('#field-ms').inputValue()).toBe('0')
    await ctx.close()
  })
})
