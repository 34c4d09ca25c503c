import { describe, expect, it } from 'vitest'
import { route } from './httpstream'

describe('the HTTP routes of socket commands', () => {
  it('maps each command to the route it mirrors', () => {
    expect(route({ id: 'cr1', type: 'stream_chat', chatId: 'c 1', content: 'hi', userTools: ['calculator'] })).toEqual({
      path: '/api/v1/chats/c%201/messages',
      body: { clientRequestId: 'cr1', content: 'hi', userTools: ['calculator'] },
    })
    expect(route({ id: 'cr2', type: 'stream_agent_chat', chatId: 'c', agentNodeId: 'a1', content: 'x' })?.path).toBe('/api/v1/chats/c/agent-messages')
    expect(route({ id: 'cr3', type: 'continue_message', chatId: 'c', messageId: 'm', resume: { approved: true } })).toEqual({
      path: '/api/v1/chats/c/messages/m/continue',
      body: { clientRequestId: 'cr3', resume: { approved: true } },
    })
    expect(route({ id: 'cr4', type: 'retry_message', chatId: 'c', messageId: 'm' })?.path).toBe('/api/v1/chats/c/messages/m/retry')
    expect(route({ id: 'cr5', type: 'edit_user_message', chatId: 'c', messageId: 'm', content: 'y' })?.path).toBe('/api/v1/chats/c/messages/m/edit')
    expect(route({ id: 'r', type: 'resume', runId: 'r_1', value: { approved: false } })).toEqual({ path: '/api/v1/runs/r_1/resume', body: { value: { approved: false } } })
    expect(route({ id: 'k', type: 'cancel', chatId: 'c', clientRequestId: 'cr1' })).toEqual({ path: '/api/v1/chats/c/cancel', body: { clientRequestId: 'cr1' } })
    expect(route({ id: 'k', type: 'cancel', runId: 'r_1' })?.path).toBe('/api/v1/runs/r_1/cancel')
    expect(route({ id: 'k', type: 'cancel', clientRequestId: 'cr1' })).toBeUndefined()
    expect(route({ id: 's', type: 'subscribe', runId: 'r', afterSeq: 0 })).toBeUndefined()
  })
})
