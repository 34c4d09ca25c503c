// @ag-ui/client's HttpAgent against chatgraph's AG-UI endpoint.
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import { HttpAgent } from '@ag-ui/client'
import { agentGraph, approvalGraph, startServer } from './server.mjs'

let server, plain, approve, slow, whole

before(async () => {
  server = await startServer()
  // Words 20 ms apart: each its own delta (words that come faster than
  // their commit share one).
  plain = await server.api('POST', '/api/v1/graphs', agentGraph('ag-ui helper', { tokenDelayMs: 20 }))
  approve = await server.api('POST', '/api/v1/graphs', approvalGraph('ag-ui approvals'))
  slow = await server.api('POST', '/api/v1/graphs', agentGraph('ag-ui slow', { tokenDelayMs: 150 }))
  // a1 (words 50 ms apart) and a2 into one chat_output; a2, given a tool
  // command by a template, calls the calculator while a1 streams.
  const pos = { x: 0, y: 0 }
  const edge = (id, source, sourceHandle, target, targetHandle, channel = 'flow') => ({
    id, source, sourceHandle, target, targetHandle, data: { channel },
  })
  whole = await server.api('POST', '/api/v1/graphs', agentGraph('ag-ui two agents', { tokenDelayMs: 50 }, [
    { id: 't', type: 'template', position: pos, data: { template: '/tool calculator {"expression":"6*7"}' } },
    { id: 'a2', type: 'agent', position: pos, data: { name: 'Calc' } },
    { id: 'calc', type: 'tool', position: pos, data: { name: 'calculator' } },
  ], [
    edge('e3', 'start', 'message', 't', 'input'),
    edge('e4', 't', 'output', 'a2', 'input'),
    edge('e5', 'a2', 'output', 'out', 'input'),
    edge('l1', 'calc', 'tool', 'a2', 'tools', 'link'),
  ]))
})

after(async () => {
  await server?.stop()
})

function agentFor(graph) {
  return new HttpAgent({
    url: `${server.url}/api/v1/ag-ui/graphs/${graph.id}`,
    headers: { Authorization: `Bearer ${server.token}` },
    threadId: `t_${randomUUID()}`,
  })
}

/** Runs the agent, collecting every event and the run's outcome. */
async function run(agent, params = {}, extra = {}) {
  const events = []
  let finished
  const res = await agent.runAgent(params, {
    onEvent: ({ event }) => {
      events.push(event)
    },
    onRunFinishedEvent: (p) => {
      finished = p
    },
    ...extra,
  })
  return { events, finished, res }
}

const types = (events) => events.map((e) => e.type)
const chatgraphRun = (events) => events.find((e) => e.type === 'RUN_STARTED').metadata.chatgraph

const weather = {
  name: 'get_weather',
  description: 'The weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}

describe('@ag-ui/client HttpAgent', () => {
  test('text streams as one message whose id is the chat message id', async () => {
    const agent = agentFor(plain)
    agent.addMessage({ id: randomUUID(), role: 'user', content: 'hello big world' })
    const { events, finished } = await run(agent)
    const t = types(events)
    assert.equal(t[0], 'RUN_STARTED')
    assert.equal(t.at(-1), 'RUN_FINISHED')
    assert.equal(finished.outcome, 'success')
    assert.ok(t.includes('STEP_STARTED') && t.includes('STEP_FINISHED'))
    const deltas = events.filter((e) => e.type === 'TEXT_MESSAGE_CONTENT').map((e) => e.delta)
    assert.deepEqual(deltas, ['echo:', ' hello', ' big', ' world'])
    const { messageId, chatId } = chatgraphRun(events)
    assert.equal(chatId, agent.threadId)
    assert.ok(events.filter((e) => e.type.startsWith('TEXT_MESSAGE')).every((e) => e.messageId === messageId))
    const answer = agent.messages.find((m) => m.id === messageId)
    assert.equal(answer.role, 'assistant')
    assert.equal(answer.content, 'echo: hello big world')
    // The thread is a chat: the server keeps the turn.
    const chat = await server.api('GET', `/api/v1/chats/${agent.threadId}`)
    assert.equal(chat.messages.find((m) => m.id === messageId).content, 'echo: hello big world')

    // The next turn of the thread answers with the chat's history.
    agent.addMessage({ id: randomUUID(), role: 'user', content: 'again' })
    const second = await run(agent)
    assert.equal(second.finished.outcome, 'success')
    assert.equal(agent.messages.at(-1).content, 'echo: again')
    assert.equal((await server.api('GET', `/api/v1/chats/${agent.threadId}`)).messages.length, 4)
  })

  test('a frontend tool call ends the run; the tool result continues it', async () => {
    const agent = agentFor(plain)
    agent.addMessage({ id: randomUUID(), role: 'user', content: '/tool get_weather {"city":"Paris"}' })
    const first = await run(agent, { tools: [weather] })
    assert.equal(first.finished.outcome, 'success')
    assert.equal(first.finished.pendingToolCallIds.length, 1)
    const callId = first.finished.pendingToolCallIds[0]
    const t = types(first.events)
    assert.deepEqual(t.slice(t.indexOf('TOOL_CALL_START'), t.indexOf('TOOL_CALL_END') + 1), ['TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_END'])
    const withCall = agent.messages.find((m) => m.toolCalls?.some((c) => c.id === callId))
    assert.equal(withCall.id, chatgraphRun(first.events).messageId, 'the call hangs on the chat message')
    const call = withCall.toolCalls.find((c) => c.id === callId)
    assert.equal(call.function.name, 'get_weather')
    assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' })

    // The client runs the tool and sends its result.
    agent.addMessage({ id: randomUUID(), role: 'tool', toolCallId: callId, content: 'sunny, 21°C' })
    const second = await run(agent, { tools: [weather] })
    assert.equal(second.finished.outcome, 'success')
    assert.deepEqual(second.finished.pendingToolCallIds ?? [], [])
    const answer = agent.messages.find((m) => m.id === chatgraphRun(second.events).messageId)
    assert.match(answer.content, /tool get_weather returned: sunny, 21°C$/)
  })

  test('server tool calls are shown with their results', async () => {
    const agent = agentFor(plain)
    agent.addMessage({ id: randomUUID(), role: 'user', content: '/tool calculator {"expression":"6*7"}' })
    const { events, finished } = await run(agent, { forwardedProps: { userTools: ['calculator'] } })
    assert.equal(finished.outcome, 'success')
    const { messageId } = chatgraphRun(events)
    const result = events.find((e) => e.type === 'TOOL_CALL_RESULT')
    assert.equal(result.content, '42')
    assert.equal(events.find((e) => e.type === 'TOOL_CALL_START').toolCallName, 'calculator')
    assert.equal(agent.messages.find((m) => m.role === 'tool').content, '42')
    // The call hangs on the answer, its result follows it.
    const answer = agent.messages.find((m) => m.id === messageId)
    assert.equal(answer.toolCalls[0].function.name, 'calculator')
    assert.equal(answer.content, 'tool calculator returned: 42')
  })

  test('an answer of two agents arrives whole in one text message', async () => {
    const agent = agentFor(whole)
    agent.addMessage({ id: randomUUID(), role: 'user', content: 'one two' })
    const { events, finished } = await run(agent)
    assert.equal(finished.outcome, 'success')
    const t = types(events)
    assert.equal(t.filter((x) => x === 'TEXT_MESSAGE_START').length, 1)
    assert.equal(t.filter((x) => x === 'TEXT_MESSAGE_END').length, 1)
    const { messageId } = chatgraphRun(events)
    const chat = await server.api('GET', `/api/v1/chats/${agent.threadId}`)
    const content = chat.messages.find((m) => m.id === messageId).content
    assert.equal(content, 'echo: one two\n\ntool calculator returned: 42')
    // a1's text streamed live, the rest came at the end; a2's call hangs
    // on the same message.
    const answer = agent.messages.find((m) => m.id === messageId)
    assert.equal(answer.content, content)
    assert.equal(answer.toolCalls[0].function.name, 'calculator')
  })

  test('an approval interrupts the run; resume continues it', async () => {
    const agent = agentFor(approve)
    agent.addMessage({ id: randomUUID(), role: 'user', content: '/tool calculator {"expression":"6*7"}' })
    const first = await run(agent)
    assert.equal(first.finished.outcome, 'interrupt')
    assert.equal(first.finished.interrupts.length, 1)
    const it = first.finished.interrupts[0]
    assert.equal(it.reason, 'tool_approval')
    assert.match(it.message, /calculator/)
    assert.equal(agent.pendingInterrupts.length, 1)
    const msg = (await server.api('GET', `/api/v1/chats/${agent.threadId}`)).messages.find((m) => m.role === 'assistant')
    assert.equal(msg.status, 'interrupted')

    // The client must answer the interrupt before anything else.
    await assert.rejects(run(agent), /pending interrupt/)
    const second = await run(agent, { resume: [{ interruptId: it.id, status: 'resolved', payload: { approved: true } }] })
    assert.equal(second.finished.outcome, 'success')
    assert.equal(agent.pendingInterrupts.length, 0)
    const done = (await server.api('GET', `/api/v1/chats/${agent.threadId}`)).messages.find((m) => m.id === msg.id)
    assert.equal(done.status, 'completed')
    assert.equal(done.content, 'tool calculator returned: 42')
    assert.equal(agent.messages.find((m) => m.id === msg.id).content, 'tool calculator returned: 42')
  })

  test('abortRun cancels the run on the server', async () => {
    const agent = agentFor(slow)
    agent.addMessage({ id: randomUUID(), role: 'user', content: 'one two three four five six seven eight nine ten eleven twelve' })
    let runInfo
    const done = run(agent, {}, {
      onTextMessageContentEvent: () => {
        agent.abortRun()
      },
      onRunStartedEvent: ({ event }) => {
        runInfo = event.metadata.chatgraph
      },
    }).catch((e) => e)
    await done
    assert.ok(runInfo, 'the run started')
    let r
    for (let i = 0; i < 100; i++) {
      r = await server.api('GET', `/api/v1/runs/${runInfo.runId}`)
      if (r.status !== 'running' && r.status !== 'pending') break
      await new Promise((res) => setTimeout(res, 100))
    }
    assert.equal(r.status, 'cancelled')
    const msg = (await server.api('GET', `/api/v1/chats/${agent.threadId}`)).messages.find((m) => m.id === runInfo.messageId)
    assert.equal(msg.status, 'cancelled')
  })

  test('errors: an unknown graph, no turn in the input', async () => {
    const missing = new HttpAgent({ url: `${server.url}/api/v1/ag-ui/graphs/nope`, headers: { Authorization: `Bearer ${server.token}` } })
    missing.addMessage({ id: randomUUID(), role: 'user', content: 'hi' })
    await assert.rejects(run(missing), /404/)
    const agent = agentFor(plain)
    agent.addMessage({ id: randomUUID(), role: 'assistant', content: 'hi' })
    await assert.rejects(run(agent), /400/)
  })
})
