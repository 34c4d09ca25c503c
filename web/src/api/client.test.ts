import { describe, expect, it } from 'vitest'
import { followPages, nextLink } from './client'

describe('nextLink', () => {
  it('reads rel="next" and nothing else', () => {
    expect(nextLink('</api/v1/graphs?cursor=abc&limit=2>; rel="next"')).toBe('/api/v1/graphs?cursor=abc&limit=2')
    expect(nextLink('</a>; rel="prev", </b>; rel="next"')).toBe('/b')
    expect(nextLink('</a>; rel=next')).toBe('/a')
    expect(nextLink('</a>; rel="nextish"')).toBeUndefined()
    expect(nextLink('</a>; rel="prev"')).toBeUndefined()
    expect(nextLink(null)).toBeUndefined()
    expect(nextLink('')).toBeUndefined()
  })
})

/** A server of pages of 2 items: the Link of each full page names the next. */
function pages(items: number[]) {
  const asked: string[] = []
  const get = async (url: string) => {
    asked.push(url)
    const at = Number(new URL(url, 'http://x').searchParams.get('cursor'))
    const page = items.slice(at, at + 2)
    const headers = new Headers()
    if (page.length === 2) headers.set('Link', `</list?cursor=${at + 2}>; rel="next"`)
    return new Response(JSON.stringify(page), { status: 200, headers })
  }
  return { get, asked }
}

describe('followPages', () => {
  it('reads every page the Links name, in order', async () => {
    const s = pages([1, 2, 3, 4, 5])
    expect(await followPages<number>('</list?cursor=0>; rel="next"', s.get)).toEqual([1, 2, 3, 4, 5])
    expect(s.asked).toEqual(['/list?cursor=0', '/list?cursor=2', '/list?cursor=4'])
  })
  it('reads nothing without a next link', async () => {
    const s = pages([1, 2])
    expect(await followPages<number>(null, s.get)).toEqual([])
    expect(s.asked).toEqual([])
  })
  it('stops at an empty page after a full one', async () => {
    const s = pages([1, 2, 3, 4])
    expect(await followPages<number>('</list?cursor=0>; rel="next"', s.get)).toEqual([1, 2, 3, 4])
    expect(s.asked).toHaveLength(3)
  })
  it('throws the API error of a failed page', async () => {
    const get = async () => new Response(JSON.stringify({ error: { code: 'invalid_json', message: 'cursor is not one this server gave' } }), { status: 400 })
    await expect(followPages('</list?cursor=bad>; rel="next"', get)).rejects.toMatchObject({ status: 400, code: 'invalid_json' })
  })
  it('is bounded', async () => {
    const loop = async () => new Response('[1]', { headers: { Link: '</again>; rel="next"' } })
    expect(await followPages<number>('</again>; rel="next"', loop, 5)).toEqual([1, 1, 1, 1, 1])
  })
})
