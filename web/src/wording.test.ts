import { describe, expect, it } from 'vitest'
import { codeText, diagnosticText, fieldLabel, messageErrorText, nodeStatusText } from './wording'

describe('wording', () => {
  it('says statuses and codes in words, and keeps unknown ones as they are', () => {
    expect(nodeStatusText('replayed')).toBe('Reused')
    expect(nodeStatusText('completed')).toBe('Done')
    expect(codeText('user_cancel')).toBe('You stopped this answer.')
    expect(codeText('user_rollback')).toBe('You stopped this answer and took the message back.')
    expect(codeText('something_new')).toBe('something_new')
    expect(messageErrorText('cancelled', 'user_cancel')).toBe('You stopped this answer.')
    expect(messageErrorText('failed', 'node x failed: boom')).toBe('node x failed: boom')
  })
  it('names the field a diagnostic is about', () => {
    expect(diagnosticText({ path: 'nodes[4].data.template', message: 'is required' })).toBe('Template: required')
    expect(diagnosticText({ path: 'nodes[2].data.temperature', message: 'must be at most 2' })).toBe('Temperature: must be at most 2')
    expect(diagnosticText({ path: 'edges[0].data.channel', message: 'data.channel is required: "flow" or "link"' })).toBe(
      'Channel: required ("flow" or "link")',
    )
    expect(diagnosticText({ path: 'nodes[1]', message: 'flow cycle: a -> b -> a' })).toBe('flow cycle: a -> b -> a')
    expect(diagnosticText({ path: 'nodes[0].data.name', message: 'is required' }, () => 'Tool')).toBe('Tool: required')
    expect(fieldLabel('maxSteps')).toBe('Max steps')
    expect(fieldLabel('systemPrompt')).toBe('System prompt')
  })
})
