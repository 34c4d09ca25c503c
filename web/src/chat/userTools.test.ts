import { describe, expect, it } from 'vitest'
import { allowedUserTools } from './userTools'

describe('allowedUserTools', () => {
  const all = ['calculator', 'current_time', 'http_request', 'everything/echo']
  const safe = new Set(['calculator', 'current_time'])
  it('offers only the safe tools where no chat_start lists userTools', () => {
    expect(allowedUserTools(all, [], safe)).toEqual(['calculator', 'current_time'])
  })
  it('offers what every list names, safe or not', () => {
    expect(allowedUserTools(all, [['http_request', 'calculator']], safe)).toEqual(['calculator', 'http_request'])
    expect(allowedUserTools(all, [['http_request', 'calculator'], ['calculator', 'everything/echo']], safe)).toEqual(['calculator'])
    expect(allowedUserTools(all, [[]], safe)).toEqual([])
  })
})
