// Generates src/api/openapi.gen.ts from the API's OpenAPI document:
// docs/openapi.json (the published copy), or transport/openapi.json (the
// one the server embeds; a Go test keeps the two equal) when docs has none.
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { resolve } from 'node:path'

const root = resolve(import.meta.dirname, '..', '..')
const doc = ['docs/openapi.json', 'transport/openapi.json'].map((p) => resolve(root, p)).find(existsSync)
if (!doc) {
  console.error('gen-api: no docs/openapi.json or transport/openapi.json')
  process.exit(1)
}
const bin = resolve(import.meta.dirname, '..', 'node_modules', '.bin', 'openapi-typescript')
execFileSync(
  bin,
  [doc, '-o', 'src/api/openapi.gen.ts', '--alphabetize', '--default-non-nullable', 'false', '--empty-objects-unknown', '--silent'],
  { cwd: resolve(import.meta.dirname, '..'), stdio: 'inherit' },
)
