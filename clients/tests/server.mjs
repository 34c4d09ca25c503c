// Builds ./cmd/server and starts it as a real process (a free port, a
// fresh state dir, a token) for the client tests.
import { spawn, execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'

const repoRoot = resolve(import.meta.dirname, '..', '..')

async function freePort() {
  return new Promise((res, rej) => {
    const s = createServer()
    s.once('error', rej)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => res(port))
    })
  })
}

/** Starts a server; returns {url, token, api(), stop(), log()}. */
export async function startServer() {
  const dir = mkdtempSync(join(tmpdir(), 'chatgraph-clients-'))
  const bin = join(dir, 'chatgraph-server')
  execFileSync(process.env.GO ?? 'go', ['build', '-o', bin, './cmd/server'], { cwd: repoRoot, stdio: 'inherit' })
  const port = await freePort()
  const url = `http://127.0.0.1:${port}`
  const token = 'client-test-token'
  let out = ''
  const proc = spawn(bin, ['--addr', `127.0.0.1:${port}`, '--state-dir', join(dir, 'state'), '--log-level', 'warn'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, CHATGRAPH_TOKEN: token },
  })
  proc.stdout.on('data', (b) => (out += String(b)))
  proc.stderr.on('data', (b) => (out += String(b)))
  const deadline = Date.now() + 30000
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`server exited ${proc.exitCode}:\n${out}`)
    try {
      if ((await fetch(`${url}/readyz`)).ok) break
    } catch {
      /* not up yet */
    }
    if (Date.now() > deadline) {
      proc.kill('SIGKILL')
      throw new Error(`server did not get ready:\n${out}`)
    }
    await new Promise((r) => setTimeout(r, 100))
  }
  /** Calls the chatgraph API (JSON in, JSON out); throws on a non-2xx. */
  async function api(method, path, body) {
    const r = await fetch(url + path, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    const text = await r.text()
    if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`)
    return text ? JSON.parse(text) : undefined
  }
  async function stop() {
    if (proc.exitCode === null) {
      const exited = new Promise((r) => proc.once('exit', r))
      proc.kill('SIGTERM')
      const t = setTimeout(() => proc.kill('SIGKILL'), 15000)
      await exited
      clearTimeout(t)
    }
    rmSync(dir, { recursive: true, force: true })
  }
  return { url, token, api, stop, log: () => out }
}

const pos = { x: 0, y: 0 }
const flow = (id, source, target, targetHandle = 'input', sourceHandle = 'output') => ({
  id, source, sourceHandle, target, targetHandle, data: { channel: 'flow' },
})

/** chat_start -> agent -> chat_output, plus extra nodes and edges. */
export function agentGraph(name, agentData = {}, extraNodes = [], extraEdges = []) {
  return {
    name,
    nodes: [
      { id: 'start', type: 'chat_start', position: pos, data: {} },
      { id: 'a1', type: 'agent', position: pos, data: { name: 'Helper', ...agentData } },
      { id: 'out', type: 'chat_output', position: pos, data: {} },
      ...extraNodes,
    ],
    edges: [flow('e1', 'start', 'a1', 'input', 'message'), flow('e2', 'a1', 'out'), ...extraEdges],
  }
}

/** agentGraph with the calculator linked and requiring approval. */
export function approvalGraph(name) {
  return agentGraph(name, {}, [{ id: 'calc', type: 'tool', position: pos, data: { name: 'calculator', requireApproval: true } }], [
    { id: 'e3', source: 'calc', sourceHandle: 'tool', target: 'a1', targetHandle: 'tools', data: { channel: 'link' } },
  ])
}

/** chat_start -> flaky (always fails with code boom). */
export function failingGraph(name) {
  return {
    name,
    nodes: [
      { id: 'start', type: 'chat_start', position: pos, data: {} },
      { id: 'f', type: 'flaky', position: pos, data: { failTimes: 100, errorCode: 'boom' } },
    ],
    edges: [flow('e1', 'start', 'f', 'input', 'message')],
  }
}
