// The `openai` npm SDK against chatgraph's OpenAI-compatible API.
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import OpenAI from 'openai'
import { agentGraph, failingGraph, startServer } from './server.mjs'

let server, client, graph, failing

before(async () => {
  server = await startServer()
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: server.token, maxRetries: 0 })
  // Words 20 ms apart: each its own delta (words that come faster than
  // their commit share one).
  graph = await server.api('POST', '/api/v1/graphs', agentGraph('npm helper', { tokenDelayMs: 20 }))
  failing = await server.api('POST', '/api/v1/graphs', failingGraph('npm failing'))
})

after(async () => {
  await server?.stop()
})

const weather = {
  type: 'function',
  function: { name: 'get_weather', description: 'The weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
}

describe('openai SDK', () => {
  test('models.list lists the graphs; the name is an alias', async () => {
    const ids = []
    for await (const m of client.models.list()) ids.push(m.id)
    assert.ok(ids.includes(graph.id))
    assert.ok(ids.includes(failing.id))
    const m = await client.models.retrieve('npm helper')
    assert.equal(m.id, graph.id)
    assert.equal(m.owned_by, 'chatgraph')
  })

  test('create, not streamed: text and finish reason', async () => {
    const r = await client.chat.completions.create({
      model: graph.id,
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: 'hello there' },
      ],
    })
    assert.equal(r.object, 'chat.completion')
    assert.match(r.id, /^chatcmpl-r_/)
    assert.equal(r.choices.length, 1)
    assert.equal(r.choices[0].message.role, 'assistant')
    assert.equal(r.choices[0].message.content, 'echo: hello there')
    assert.equal(r.choices[0].finish_reason, 'stop')
  })

  test('create, streamed: word by word, then stop', async () => {
    const stream = await client.chat.completions.create({ model: 'npm helper', stream: true, messages: [{ role: 'user', content: 'hello big world' }] })
    const deltas = []
    let finish
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk')
      const c = chunk.choices[0]
      if (c.delta.content) deltas.push(c.delta.content)
      if (c.finish_reason) finish = c.finish_reason
    }
    assert.deepEqual(deltas, ['echo:', ' hello', ' big', ' world'])
    assert.equal(finish, 'stop')
  })

  test('client tools come back as tool_calls; the result continues the run', async () => {
    const messages = [{ role: 'user', content: '/tool get_weather {"city":"Paris"}' }]
    const r = await client.chat.completions.create({ model: graph.id, messages, tools: [weather] })
    assert.equal(r.choices[0].finish_reason, 'tool_calls')
    const [call] = r.choices[0].message.tool_calls
    assert.equal(call.type, 'function')
    assert.equal(call.function.name, 'get_weather')
    assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' })

    const stream = client.chat.completions.stream({
      model: graph.id,
      tools: [weather],
      messages: [...messages, r.choices[0].message, { role: 'tool', tool_call_id: call.id, content: 'sunny, 21°C' }],
    })
    const done = await stream.finalChatCompletion()
    assert.equal(done.choices[0].message.content, 'tool get_weather returned: sunny, 21°C')
    assert.equal(done.choices[0].finish_reason, 'stop')
  })

  test('errors: unknown model, bad key, bad request, a failing run', async () => {
    await assert.rejects(client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }), (err) => {
      assert.ok(err instanceof OpenAI.NotFoundError)
      assert.equal(err.status, 404)
      assert.equal(err.code, 'model_not_found')
      return true
    })
    const wrong = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'wrong', maxRetries: 0 })
    await assert.rejects(wrong.models.list(), (err) => err instanceof OpenAI.AuthenticationError && err.status === 401)
    await assert.rejects(
      client.chat.completions.create({ model: graph.id, messages: [{ role: 'assistant', content: 'hi' }] }),
      (err) => err instanceof OpenAI.BadRequestError && err.type === 'invalid_request_error',
    )
    await assert.rejects(client.chat.completions.create({ model: failing.id, messages: [{ role: 'user', content: 'x' }] }), (err) => {
      assert.ok(err instanceof OpenAI.InternalServerError)
      assert.equal(err.code, 'boom')
      return true
    })
    const stream = await client.chat.completions.create({ model: failing.id, stream: true, messages: [{ role: 'user', content: 'x' }] })
    await assert.rejects(
      (async () => {
        for await (const _ of stream) {
          /* the error frame ends it */
        }
      })(),
      (err) => err instanceof OpenAI.APIError && /boom|failed/.test(err.message),
    )
  })
})
