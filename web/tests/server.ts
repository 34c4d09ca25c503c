// Starts a real chatgraph server for the browser tests: `go build` of
// ./cmd/server into a temp dir (with the built UI embedded), a free port,
// a fresh state dir. When cmd/server does not serve the web package yet,
// the build swaps in, through `go build -overlay`, a web.go whose webUI
// returns web.Assets() — no file in cmd/ is changed.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'

export const repoRoot = resolve(import.meta.dirname, '..', '..')

export interface RunningServer {
  url: string
  stop: () => Promise<void>
  log: () => string
}

async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer()
    s.once('error', rej)
    s.listen(0, '127.0.0.1', () => {
      const a = s.address()
      const port = typeof a === 'object' && a ? a.port : 0
      s.close(() => res(port))
    })
  })
}

/** Builds the server binary once; returns its path. */
export function buildServer(dir: string): string {
  if (!existsSync(join(repoRoot, 'web', 'dist', 'ui', 'index.html'))) {
    throw new Error('the UI is not built: run `make web` (or `npm run build` in web/) first')
  }
  const bin = join(dir, 'chatgraph-server')
  const args = ['build', '-o', bin]
  const webGo = join(repoRoot, 'cmd', 'server', 'web.go')
  if (existsSync(webGo) && !readFileSync(webGo, 'utf8').includes('chatgraph/web')) {
    const replacement = join(dir, 'web.go')
    writeFileSync(
      replacement,
      'package main\n\nimport (\n\t"io/fs"\n\n\t"chatgraph/web"\n)\n\nfunc webUI() fs.FS { return web.Assets() }\n',
    )
    const overlay = join(dir, 'overlay.json')
    writeFileSync(overlay, JSON.stringify({ Replace: { [webGo]: replacement } }))
    args.push('-overlay', overlay)
  }
  args.push('./cmd/server')
  execFileSync(process.env.GO ?? 'go', args, { cwd: repoRoot, stdio: 'inherit' })
  return bin
}

export async function startServer(bin: string, extraArgs: string[] = [], env: Record<string, string> = {}): Promise<RunningServer> {
  const port = await freePort()
  const state = mkdtempSync(join(tmpdir(), 'chatgraph-web-state-'))
  const url = `http://127.0.0.1:${port}`
  let out = ''
  const proc: ChildProcess = spawn(bin, ['--addr', `127.0.0.1:${port}`, '--state-dir', state, '--log-level', 'warn', ...extraArgs], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  })
  proc.stdout!.on('data', (b) => (out += String(b)))
  proc.stderr!.on('data', (b) => (out += String(b)))
  const deadline = Date.now() + 20000
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`server exited ${proc.exitCode}:\n${out}`)
    try {
      const r = await fetch(`${url}/readyz`)
      if (r.ok) break
    } catch {
      /* not up yet */
    }
    if (Date.now() > deadline) {
      proc.kill('SIGKILL')
      throw new Error(`server did not get ready:\n${out}`)
    }
    await new Promise((r) => setTimeout(r, 100))
  }
  return {
    url,
    log: () => out,
    stop: async () => {
      if (proc.exitCode === null) {
        const done = new Promise((r) => proc.once('exit', r))
        proc.kill('SIGTERM')
        const t = setTimeout(() => proc.kill('SIGKILL'), 5000)
        await done
        clearTimeout(t)
      }
      rmSync(state, { recursive: true, force: true })
    },
  }
}
