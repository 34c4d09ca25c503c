// What a person decided on each approval of an answer. An answer that
// waited for approval is written by a chain of runs: the run that asked
// (approval_required), then the run that continued it with the decision
// (parentRunId points back). The decision shows in the continuing run: a
// tool call's tool_result carries {approval}, an approval node completes
// (approved) or fails with approval_denied. The arguments of a call live
// in the asking run (its tool_call), so they are looked up along the chain.
import type { RunView, ToolCallView } from '../stream/reducer'

export interface ApprovalRecord {
  key: string
  nodeId: string
  prompt?: string
  call?: { name: string; arguments?: unknown }
  input?: unknown
  /** undefined: decided (or not) but the continuing run has not said yet. */
  approved?: boolean
  reason?: string
}

/** The runs behind an answer, oldest first, as far as this page knows them. */
export function runChain(runId: string | null | undefined, runs: Record<string, RunView>): RunView[] {
  const out: RunView[] = []
  const seen = new Set<string>()
  for (let r = runId ? runs[runId] : undefined; r && !seen.has(r.runId); r = r.parentRunId ? runs[r.parentRunId] : undefined) {
    seen.add(r.runId)
    out.unshift(r)
  }
  return out
}

/** The parent run an answer's chain is missing (to fetch it), if any. */
export function missingParent(runId: string | null | undefined, runs: Record<string, RunView>): string | undefined {
  const chain = runChain(runId, runs)
  const first = chain[0]
  return first?.parentRunId && !runs[first.parentRunId] ? first.parentRunId : undefined
}

function findCall(run: RunView, id: string): ToolCallView | undefined {
  for (const n of Object.values(run.nodes)) {
    const c = n.toolCalls.find((x) => x.id === id)
    if (c) return c
  }
  return undefined
}

/** The arguments of tool call id, from whichever run of the chain saw its tool_call. */
export function callArguments(chain: RunView[], id: string): unknown {
  for (const r of chain) {
    const c = findCall(r, id)
    if (c && c.arguments !== undefined) return c.arguments
    const a = r.approvals.find((x) => x.toolCall?.id === id)
    if (a?.toolCall?.arguments !== undefined) return a.toolCall.arguments
  }
  return undefined
}

/** Every approval asked by a run of the chain that a later run continued, with its decision. */
export function approvalRecords(chain: RunView[]): ApprovalRecord[] {
  const out: ApprovalRecord[] = []
  for (let i = 0; i + 1 < chain.length; i++) {
    const asked = chain[i]
    const next = chain[i + 1]
    for (const a of asked.approvals) {
      const rec: ApprovalRecord = { key: `${asked.runId}:${a.seq}`, nodeId: a.nodeId, prompt: a.prompt, input: a.input }
      if (a.toolCall) {
        rec.call = { name: a.toolCall.name, arguments: a.toolCall.arguments }
        const c = findCall(next, a.toolCall.id)
        if (c?.approval) {
          rec.approved = c.approval.approved
          rec.reason = c.approval.reason
        }
      } else {
        const n = next.nodes[a.nodeId]
        if (n?.status === 'completed') rec.approved = true
        else if (n?.status === 'failed' && n.errorCode === 'approval_denied') {
          rec.approved = false
          rec.reason = denialReason(n.error, a.nodeId)
        }
      }
      out.push(rec)
    }
  }
  return out
}

/**
 * The reason given for denying approval node nodeId, read from its error:
 * the server writes "approval_denied: <node>: rejected[: <reason>]", so
 * "approval_denied: gate: rejected: too late" is "too late" and no reason
 * is undefined. An error in another form is shown whole.
 */
export function denialReason(error: string | undefined, nodeId: string): string | undefined {
  if (!error) return undefined
  const head = `approval_denied: ${nodeId}: rejected`
  if (!error.startsWith(head)) return error
  const rest = error.slice(head.length)
  return rest.startsWith(': ') && rest.length > 2 ? rest.slice(2) : undefined
}
