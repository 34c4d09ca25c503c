import { defineConfig } from 'vitest/config'
import SummaryReporter from './tests/summary-reporter'

// Unit tests: pure TypeScript (the stream reducer, chat tree, schema
// validation, layout), no DOM and no server.
export default defineConfig({
  test: {
    include: ['src/**/*.test.ts'],
    environment: 'node',
    reporters: ['default', new SummaryReporter('web-unit')],
  },
})
