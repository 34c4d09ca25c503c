import { defineConfig } from 'vitest/config'

// Unit tests: pure TypeScript (the stream reducer, chat tree, schema
// validation, layout), no DOM and no server.
export default defineConfig({
  test: {
    include: ['src/**/*.test.ts'],
    environment: 'node',
  },
})
