import { defineConfig } from 'vitest/config'
import SummaryReporter from './tests/summary-reporter'

// Browser tests: Debian's Chromium driven by playwright-core against a
// real server process (tests/global-setup.ts builds and starts it).
export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    globalSetup: ['tests/global-setup.ts'],
    environment: 'node',
    testTimeout: 60_000,
    hookTimeout: 180_000,
    fileParallelism: false,
    // Polls wait for what a person would wait for; generous for a busy CI box.
    expect: { poll: { timeout: 10_000, interval: 50 } },
    pool: 'forks',
    reporters: ['default', new SummaryReporter('web-browser')],
  },
})
