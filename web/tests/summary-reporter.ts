// Prints one plain closing line, "<suite>: N passed, N failed, N skipped",
// after Vitest's own summary, so a log reader that knows no Vitest still
// sees how many tests ran.
import type { Reporter, TestModule } from 'vitest/node'

export default class SummaryReporter implements Reporter {
  constructor(private readonly name: string) {}

  onTestRunEnd(modules: ReadonlyArray<TestModule>, errors: ReadonlyArray<unknown>) {
    let passed = 0
    let failed = errors.length
    let skipped = 0
    for (const m of modules) {
      if (m.state() === 'failed' && [...m.children.allTests()].length === 0) failed++ // a file that did not load
      for (const t of m.children.allTests()) {
        const s = t.result().state
        if (s === 'passed') passed++
        else if (s === 'failed') failed++
        else skipped++
      }
    }
    process.stdout.write(`\n${this.name}: ${passed} passed, ${failed} failed, ${skipped} skipped\n`)
  }
}
