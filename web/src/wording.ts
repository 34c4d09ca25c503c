// What the UI says for every status and code the server sends: one table
// per kind, in this one file. The raw value goes in a tooltip next to the
// words (see Said), so a person reads words and a developer still finds
// the code. A value missing here is shown as it came, never hidden.

/** Node statuses on the canvas cards, in the inspector and the minimap legend. */
export const nodeStatusWords: Record<string, string> = {
  idle: '',
  pending: 'Waiting',
  running: 'Running',
  completed: 'Done',
  replayed: 'Reused',
  failed: 'Failed',
  skipped: 'Skipped',
  cancelled: 'Stopped',
  interrupted: 'Waiting for you',
  succeeded: 'Done',
  stale_running: 'Cut off by a restart',
}

/** Longer explanations of node statuses (tooltips). */
export const nodeStatusHelp: Record<string, string> = {
  pending: 'will run when its inputs arrive',
  running: 'working now',
  completed: 'finished in this run',
  replayed: 'finished in an earlier run; its output was reused, not run again',
  failed: 'stopped with an error',
  skipped: 'not needed in this run',
  cancelled: 'stopped before it finished',
  interrupted: 'paused until a person decides',
}

/** Run statuses (inspector, canvas legend). */
export const runStatusWords: Record<string, string> = {
  pending: 'Starting',
  running: 'Running',
  completed: 'Done',
  failed: 'Failed',
  cancelled: 'Stopped',
  interrupted: 'Waiting for you',
}

/** Statuses of an answer in the chat (a completed one shows no badge). */
export const messageStatusWords: Record<string, string> = {
  pending: 'Queued',
  running: 'Writing…',
  completed: 'Done',
  failed: 'Failed',
  cancelled: 'Stopped',
  interrupted: 'Waiting for you',
}

/** WebSocket states in the top bar. */
export const socketWords: Record<string, string> = {
  connecting: 'Connecting…',
  open: 'Live',
  closed: 'Offline, reconnecting…',
}

/**
 * Codes: why a run was cancelled (run_cancelled cause, a cancelled
 * message's error), why a node failed (node_failed code), why a node was
 * skipped, API and WebSocket error codes, graph diagnostic codes.
 */
export const codeWords: Record<string, string> = {
  // cancel causes (runcontrol)
  user_cancel: 'You stopped this answer.',
  shutdown: 'Stopped because the server shut down. Continue picks it up.',
  lease_lost: 'Another server process took this run over.',
  timeout: 'Stopped: it took too long.',
  superseded: 'Replaced by a newer message.',
  user_rollback: 'You stopped this answer and took the message back.',
  // node failures (runtime, nodes, models)
  error: 'The node failed.',
  panic: 'The node crashed.',
  condition_error: 'An edge condition could not be evaluated.',
  link_cycle: 'Agents call each other in a loop.',
  stale_running: 'A server restart cut this node off.',
  approval_denied: 'A person denied it.',
  invalid_resume: 'The answer to the approval was not a decision.',
  agent_max_steps: 'The agent used all its steps without a final answer.',
  tool_config: 'The agent’s tools are set up wrong (two tools with one name?).',
  ledger_error: 'Recording a tool call failed.',
  template_error: 'The template could not be filled in.',
  flaky: 'Failed on purpose (a Flaky node).',
  unknown_model: 'No such model.',
  llm_rate_limited: 'The model provider is rate limiting.',
  llm_unavailable: 'The model provider is not available.',
  llm_timeout: 'The model took too long.',
  llm_auth: 'The model provider refused the API key.',
  llm_not_found: 'The model provider does not know this model.',
  llm_bad_request: 'The model provider refused the request.',
  llm_protocol: 'The model provider answered something unreadable.',
  // skip reasons
  upstream_not_taken: 'No branch led here.',
  run_failed: 'Not run: the run failed first.',
  run_cancelled: 'Not run: the run was stopped.',
  // API and WebSocket errors
  invalid_json: 'The request was not valid.',
  invalid_graph: 'The graph has problems.',
  not_found: 'Not found (it may have been deleted).',
  conflict: 'Busy: an answer is still being written in this chat.',
  unauthorized: 'This server needs a token.',
  payload_too_large: 'Too large for the server.',
  rate_limited: 'Too many requests; wait a moment.',
  internal: 'The server failed.',
  method_not_allowed: 'The server does not allow this.',
  unavailable: 'The server is not available right now.',
  disconnected: 'The connection dropped.',
}

/** Skip reasons, run and node errors: words for a code, or the code itself. */
export function codeText(code: string | undefined | null): string {
  if (!code) return ''
  return codeWords[code] ?? code
}

export function nodeStatusText(s: string | undefined): string {
  if (!s) return ''
  return nodeStatusWords[s] ?? s
}

export function runStatusText(s: string | undefined): string {
  if (!s) return ''
  return runStatusWords[s] ?? s
}

export function messageStatusText(s: string | undefined): string {
  if (!s) return ''
  return messageStatusWords[s] ?? s
}

/**
 * The text of a message's error: a cancelled answer's error is a cause
 * code, a failed one's a sentence from the server.
 */
export function messageErrorText(status: string | undefined, error: string | undefined | null): string {
  if (!error) return ''
  if (status === 'cancelled' || codeWords[error]) return codeText(error)
  return error
}

/** "maxSteps" -> "Max steps", "systemPrompt" -> "System prompt", "ms" -> "Ms". */
export function fieldLabel(name: string, title?: string): string {
  if (title) return title
  const known: Record<string, string> = { ms: 'Milliseconds', timeoutMs: 'Timeout (ms)', tokenDelayMs: 'Token delay (ms)', requireApproval: 'Require approval' }
  if (known[name]) return known[name]
  const words = name
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .replace(/[_.]+/g, ' ')
    .trim()
    .toLowerCase()
  return words.charAt(0).toUpperCase() + words.slice(1)
}

/**
 * A field problem said with the field's name first: ("template", "is
 * required") -> "Template: required".
 */
export function fieldProblem(label: string, message: string): string {
  let m = message.trim()
  m = m.replace(/^is required\b/, 'required').replace(/^required: (.*)$/, 'required ($1)')
  return `${label}: ${m}`
}

const fieldPath = /^(nodes|edges)\[\d+\]\.data\.([A-Za-z0-9_]+)/

/**
 * A diagnostic's message for a person: one about a field names the field
 * ("Template: required") instead of a path ("nodes[4].data.template").
 */
export function diagnosticText(d: { path?: string; message: string }, title?: (field: string) => string | undefined): string {
  const m = d.path ? fieldPath.exec(d.path) : null
  if (!m) return d.message
  const field = m[2]
  const label = fieldLabel(field, title?.(field))
  const msg = d.message.replace(new RegExp(`^(data\\.)?${field}\\s+`), '')
  return fieldProblem(label, msg)
}
