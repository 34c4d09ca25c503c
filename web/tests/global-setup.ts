import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { TestProject } from 'vitest/node'
import { buildServer, startServer, type RunningServer } from './server'

declare module 'vitest' {
  export interface ProvidedContext {
    serverUrl: string
    serverBin: string
  }
}

let server: RunningServer | undefined
let dir: string | undefined

export async function setup(project: TestProject) {
  dir = mkdtempSync(join(tmpdir(), 'chatgraph-web-bin-'))
  const bin = buildServer(dir)
  server = await startServer(bin)
  project.provide('serverUrl', server.url)
  project.provide('serverBin', bin)
}

export async function teardown() {
  if (server) {
    await server.stop()
    if (process.env.CHATGRAPH_TEST_SERVER_LOG) console.log(server.log())
  }
  if (dir) rmSync(dir, { recursive: true, force: true })
}
