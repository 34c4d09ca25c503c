import { useEffect, useMemo, useRef, useState } from 'react'
import type { Message } from '../api/types'
import { isRunFinished, liveAnswer, type ApprovalView, type RunView } from '../stream/reducer'
import { socket, useRuns } from '../stream/store'
import { messageErrorText, messageStatusText } from '../wording'
import { approvalRecords, callArguments, missingParent, runChain, type ApprovalRecord } from './approvals'
import { CopyButton, Markdown } from './Markdown'
import { chatName, titleFrom, useChatNames } from './names'
import { buildTree, siblings } from './tree'
import type { useChat } from './useChat'
import { useStickToBottom } from './useStickToBottom'

type ChatApi = ReturnType<typeof useChat>

interface Props {
  chatApi: ChatApi
  chatId?: string
  chats: { id: string; title?: string; createdAt?: string }[]
  onSelectChat: (id: string | undefined) => void
  /** Creates a chat (titled after its first message) and opens it. */
  onNewChat: (title?: string) => Promise<string | undefined>
  graphSaved: boolean
  graphDirty: boolean
  graphEmpty: boolean
  onSaveGraph: () => void
  agents: { id: string; label: string }[]
  userToolNames: string[]
  suggestions: string[]
  onInspect: (runId: string) => void
}

function fmtArgs(v: unknown): string {
  if (v === undefined) return '…'
  try {
    return JSON.stringify(v)
  } catch {
    return String(v)
  }
}

function ApprovalCard({ approvals, onDecide }: { approvals: ApprovalView[]; onDecide: (decisions: Record<string, { approved: boolean; reason?: string }>) => void }) {
  const [reason, setReason] = useState('')
  const [decided, setDecided] = useState<Record<string, { approved: boolean; reason?: string }>>({})
  const keyOf = (a: ApprovalView) => a.interruptId ?? String(a.seq)
  const decide = (a: ApprovalView, approved: boolean) => {
    const next = { ...decided, [keyOf(a)]: approved ? { approved } : { approved, ...(reason ? { reason } : {}) } }
    setDecided(next)
    if (approvals.every((x) => next[keyOf(x)])) onDecide(next)
  }
  return (
    <div className="approval-card" data-testid="approval-card">
      {approvals.map((a) => (
        <div key={keyOf(a)} className="approval-item">
          <div className="approval-prompt">{a.prompt ?? 'Approval needed'}</div>
          {a.toolCall && (
            <div className="approval-call">
              <code>
                {a.toolCall.name}({fmtArgs(a.toolCall.arguments)})
              </code>
              {a.toolCall.agentNodeId && <span> by {a.toolCall.agentNodeId}</span>}
            </div>
          )}
          {a.input !== undefined && !a.toolCall && <pre className="approval-input">{fmtArgs(a.input)}</pre>}
          {decided[keyOf(a)] ? (
            <div className="approval-decided">{decided[keyOf(a)].approved ? 'Approved' : 'Denied'}, continuing…</div>
          ) : (
            <div className="approval-actions">
              <button className="primary" onClick={() => decide(a, true)}>
                Approve
              </button>
              <button className="danger" onClick={() => decide(a, false)}>
                Deny
              </button>
            </div>
          )}
        </div>
      ))}
      <input className="approval-reason" placeholder="reason (for a denial, optional)" value={reason} onChange={(e) => setReason(e.target.value)} />
    </div>
  )
}

/** The decision on an approval, kept in the transcript after the card is gone. */
function ApprovalNote({ r }: { r: ApprovalRecord }) {
  const what = r.call ? (
    <code>
      {r.call.name}({fmtArgs(r.call.arguments)})
    </code>
  ) : (
    <span>{r.prompt ?? `the step ${r.nodeId}`}</span>
  )
  const verdict = r.approved === undefined ? 'decided' : r.approved ? 'approved' : 'denied'
  return (
    <div className={`approval-note approval-${verdict}`} data-testid="approval-record" data-approved={r.approved === undefined ? '' : String(r.approved)}>
      <span className="approval-mark">{r.approved === undefined ? '…' : r.approved ? '✔' : '✘'}</span> You {verdict} {what}
      {r.reason ? <span className="approval-why"> — “{r.reason}”</span> : null}
    </div>
  )
}

function BranchNav({ m, all, onSwitch }: { m: Message; all: Message[]; onSwitch: (id: string) => void }) {
  if (all.length < 2) return null
  const i = all.findIndex((x) => x.id === m.id)
  return (
    <span className="branch-nav" data-testid="branch-nav">
      <button className="small" disabled={i <= 0} onClick={() => onSwitch(all[i - 1].id)} aria-label="previous branch">
        ‹
      </button>
      <span className="branch-pos">
        {i + 1}/{all.length}
      </span>
      <button className="small" disabled={i >= all.length - 1} onClick={() => onSwitch(all[i + 1].id)} aria-label="next branch">
        ›
      </button>
    </span>
  )
}

/**
 * A message's status: the chat's, unless the run writing it has already
 * ended in this page (the chat catches up a moment later).
 */
export function messageStatus(m: Message, run: RunView | undefined): Message['status'] {
  if (m.role === 'assistant' && run && run.runId === m.runId && isRunFinished(run.status) && (m.status === 'running' || m.status === 'pending')) {
    return run.status as Message['status']
  }
  return m.status
}

function messageText(m: Message, status: Message['status'], run: RunView | undefined): string {
  if (m.role === 'user' || m.role === 'system') return m.content
  const live = status === 'running' || status === 'pending' || (run && !isRunFinished(run.status))
  if (live || m.status === 'running' || m.status === 'pending') return liveAnswer(run)
  return m.content || liveAnswer(run)
}

function ChatTitle({ p, firstMessage }: { p: Props; firstMessage?: string }) {
  const { names, rename } = useChatNames()
  const [editing, setEditing] = useState<string | null>(null)
  const current = p.chats.find((c) => c.id === p.chatId) ?? (p.chatId ? { id: p.chatId } : undefined)
  if (editing !== null && current) {
    const done = (keep: boolean) => {
      if (keep) rename(current.id, editing)
      setEditing(null)
    }
    return (
      <input
        className="chat-rename"
        aria-label="chat name"
        autoFocus
        value={editing}
        onChange={(e) => setEditing(e.target.value)}
        onBlur={() => done(true)}
        onKeyDown={(e) => {
          if (e.key === 'Enter') done(true)
          if (e.key === 'Escape') {
            e.stopPropagation()
            done(false)
          }
        }}
      />
    )
  }
  return (
    <>
      <select aria-label="chat" value={p.chatId ?? ''} onChange={(e) => p.onSelectChat(e.target.value || undefined)} data-testid="chat-select">
        <option value="">{p.chats.length ? (p.chatId ? '' : 'New chat') : 'No chats yet'}</option>
        {p.chats.map((c) => (
          <option key={c.id} value={c.id} title={c.id}>
            {chatName(c, names, c.id === p.chatId ? firstMessage : undefined)}
          </option>
        ))}
      </select>
      {current && (
        <button
          className="small"
          title="Rename this chat (kept in this browser)"
          aria-label="rename chat"
          onClick={() => setEditing(chatName(current, names, firstMessage))}
        >
          ✎
        </button>
      )}
    </>
  )
}

export function ChatPanel(p: Props) {
  const { chatApi } = p
  const runs = useRuns()
  const [text, setText] = useState('')
  const [target, setTarget] = useState('')
  const [tools, setTools] = useState<string[]>([])
  const [editing, setEditing] = useState<{ id: string; text: string } | null>(null)
  const tree = useMemo(() => buildTree(chatApi.chat?.messages ?? []), [chatApi.chat])
  const list = useRef<HTMLDivElement>(null)
  const composer = useRef<HTMLTextAreaElement>(null)
  const { unseen, toBottom } = useStickToBottom(list)
  const busy =
    !!chatApi.inflight ||
    chatApi.path.some((m) => {
      const st = messageStatus(m, m.runId ? runs[m.runId] : undefined)
      return st === 'running' || st === 'pending'
    })

  useEffect(() => {
    if (target && !p.agents.some((a) => a.id === target)) setTarget('')
  }, [p.agents, target])

  // A chat opened (or switched to) starts at its newest message.
  useEffect(() => {
    toBottom()
  }, [p.chatId, toBottom])

  // An answer continued after an approval: fetch the run that asked, so
  // the decision and the call's arguments show.
  useEffect(() => {
    for (const m of chatApi.path) {
      const parent = m.role === 'assistant' ? missingParent(m.runId, runs) : undefined
      if (parent) socket.follow(parent)
    }
  }, [chatApi.path, runs])

  const send = async () => {
    const content = text.trim()
    if (!content) return
    const id = p.chatId ?? (await p.onNewChat(titleFrom(content)))
    if (!id) return
    setText('')
    toBottom()
    const userTools = tools.length ? tools : undefined
    const r = target
      ? await chatApi.start(id, 'stream_agent_chat', { content, agentNodeId: target, userTools })
      : await chatApi.start(id, 'stream_chat', { content, userTools })
    // Refused (too long, a busy chat…): the text comes back to be fixed, unless something new was typed.
    if (r === 'refused') setText((cur) => cur || content)
  }

  const first = chatApi.path[0]
  const firstMessage = first?.role === 'user' ? first.content : undefined

  return (
    <div className="chat" data-testid="chat-panel">
      <div className="chat-head">
        <ChatTitle p={p} firstMessage={firstMessage} />
        <button className="small" onClick={() => p.onSelectChat(undefined)} disabled={!p.graphSaved || !p.chatId} title="Start a new chat with this graph">
          New chat
        </button>
      </div>
      {p.graphSaved && p.graphDirty && <div className="chat-hint">Unsaved changes: the chat runs the saved version.</div>}
      <div className="messages-wrap">
        <div className="messages" data-testid="messages" ref={list}>
          {chatApi.path.length === 0 && (
            <div className="chat-empty" data-testid="chat-empty">
              {!p.graphSaved ? (
                p.graphEmpty ? (
                  <p>Pick a starter graph on the canvas (or build one), save it, then chat with it here.</p>
                ) : (
                  <>
                    <p>Save the graph to chat with it.</p>
                    <button className="primary" onClick={p.onSaveGraph}>
                      Save graph <kbd>Ctrl S</kbd>
                    </button>
                  </>
                )
              ) : (
                <>
                  <p>Send a message to run the graph. Try:</p>
                  <div className="suggestions">
                    {p.suggestions.map((s) => (
                      <button
                        key={s}
                        className="suggestion"
                        data-testid="suggestion"
                        onClick={() => {
                          setText(s)
                          composer.current?.focus()
                        }}
                      >
                        {s}
                      </button>
                    ))}
                  </div>
                </>
              )}
            </div>
          )}
          {chatApi.path.map((m) => {
            const run = m.runId ? runs[m.runId] : undefined
            const st = messageStatus(m, run)
            const body = messageText(m, st, run)
            const approvals = m.role === 'assistant' && run?.status === 'interrupted' && st === 'interrupted' ? run.approvals : []
            const chain = m.role === 'assistant' ? runChain(m.runId, runs) : []
            const records = approvalRecords(chain)
            const agentNode = m.role === 'assistant' && run ? Object.values(run.nodes).find((n) => n.toolCalls.length > 0) : undefined
            const live = st === 'running' || st === 'pending'
            const errText = st !== 'completed' ? messageErrorText(st, m.error) : ''
            return (
              <div key={m.id} className={`msg msg-${m.role} msg-${st}`} data-testid="msg" data-role={m.role} data-status={st} data-id={m.id}>
                <div className="msg-meta">
                  <span className="msg-role">{m.role === 'user' ? 'You' : m.role === 'system' ? 'System' : m.agentNodeId ? `Assistant · ${m.agentNodeId}` : 'Assistant'}</span>
                  {st !== 'completed' && (
                    <span className={`msg-status st-${st}`} data-testid="msg-status" title={st}>
                      {approvals.length > 0 ? 'Waiting for your approval' : messageStatusText(st)}
                    </span>
                  )}
                  <BranchNav m={m} all={siblings(tree, m)} onSwitch={(id) => void chatApi.switchTo(id)} />
                </div>
                {editing?.id === m.id ? (
                  <div className="msg-edit">
                    <textarea aria-label="edit message" value={editing.text} onChange={(e) => setEditing({ id: m.id, text: e.target.value })} />
                    <div className="msg-actions">
                      <button
                        className="primary small"
                        onClick={() => {
                          const content = editing.text.trim()
                          setEditing(null)
                          if (content && p.chatId) void chatApi.start(p.chatId, 'edit_user_message', { messageId: m.id, content })
                        }}
                      >
                        Save & send
                      </button>
                      <button className="small" onClick={() => setEditing(null)}>
                        Cancel
                      </button>
                    </div>
                  </div>
                ) : m.role === 'user' || m.role === 'system' ? (
                  <div className="msg-body msg-plain" data-testid="msg-body">
                    {body}
                  </div>
                ) : (
                  <div className="msg-body" data-testid="msg-body">
                    {body ? <Markdown text={body} /> : live ? <span className="typing" aria-label="writing">…</span> : null}
                  </div>
                )}
                {records.map((r) => (
                  <ApprovalNote key={r.key} r={r} />
                ))}
                {agentNode && (
                  <ul className="tool-calls">
                    {agentNode.toolCalls.map((c) => (
                      <li key={c.id} data-testid="tool-call">
                        tool{' '}
                        <code>
                          {c.name}({fmtArgs(c.arguments ?? callArguments(chain, c.id))})
                        </code>
                        {c.approval && !c.approval.approved ? (
                          <span className="field-error"> denied by you</span>
                        ) : (
                          <>
                            {c.result !== undefined && c.result !== '' && <> → {c.result}</>}
                            {c.error && <span className="field-error"> {c.error}</span>}
                          </>
                        )}
                      </li>
                    ))}
                  </ul>
                )}
                {errText && (
                  <div className="msg-error" title={m.error ?? undefined} data-testid="msg-error">
                    {errText}
                  </div>
                )}
                {approvals.length > 0 && p.chatId && (
                  <ApprovalCard
                    key={run!.runId}
                    approvals={approvals}
                    onDecide={(d) => {
                      const vals = Object.values(d)
                      const resume = vals.length === 1 ? vals[0] : d
                      void chatApi.start(p.chatId!, 'continue_message', { messageId: m.id, resume })
                    }}
                  />
                )}
                <div className="msg-actions">
                  {m.role === 'assistant' && body && !live && <CopyButton text={() => body} testId="copy-answer" />}
                  {m.role === 'user' && !busy && (
                    <button className="link" onClick={() => setEditing({ id: m.id, text: m.content })}>
                      Edit
                    </button>
                  )}
                  {m.role === 'assistant' && !busy && (
                    <button className="link" onClick={() => p.chatId && void chatApi.start(p.chatId, 'retry_message', { messageId: m.id })}>
                      Retry
                    </button>
                  )}
                  {m.role === 'assistant' && !busy && (st === 'cancelled' || (st === 'interrupted' && approvals.length === 0) || st === 'failed') && (
                    <button className="link" onClick={() => p.chatId && void chatApi.start(p.chatId, 'continue_message', { messageId: m.id })}>
                      Continue
                    </button>
                  )}
                  {m.runId && (
                    <button className="link" onClick={() => p.onInspect(m.runId!)}>
                      Inspect
                    </button>
                  )}
                </div>
              </div>
            )
          })}
        </div>
        {unseen && (
          <button className="new-pill" data-testid="new-messages" onClick={toBottom}>
            ↓ New messages
          </button>
        )}
      </div>
      <div className="composer">
        <div className="composer-opts">
          <label>
            to{' '}
            <select aria-label="target" value={target} onChange={(e) => setTarget(e.target.value)} data-testid="target-select" title="stream_chat runs the whole graph; stream_agent_chat one agent">
              <option value="">the whole graph</option>
              {p.agents.map((a) => (
                <option key={a.id} value={a.id}>
                  {a.label} only
                </option>
              ))}
            </select>
          </label>
          {p.userToolNames.length > 0 && (
            <span className="user-tools">
              your tools:
              {p.userToolNames.map((t) => (
                <label key={t}>
                  <input type="checkbox" checked={tools.includes(t)} onChange={(e) => setTools(e.target.checked ? [...tools, t] : tools.filter((x) => x !== t))} />
                  {t}
                </label>
              ))}
            </span>
          )}
        </div>
        <div className="composer-row">
          <textarea
            ref={composer}
            aria-label="message"
            placeholder={p.graphSaved ? 'Message (Enter to send, Shift+Enter for a new line)' : 'Save the graph first'}
            value={text}
            disabled={!p.graphSaved}
            onChange={(e) => setText(e.target.value)}
            onKeyDown={(e) => {
              if (e.key === 'Enter' && !e.shiftKey) {
                e.preventDefault()
                void send()
              }
            }}
          />
          {busy ? (
            <>
              <button className="danger" onClick={() => void chatApi.stop()} data-testid="stop">
                Stop
              </button>
              <button
                onClick={() => void chatApi.stop('rollback')}
                title="Stop and take the message back, as if it was never sent"
                data-testid="take-back"
              >
                Take back
              </button>
            </>
          ) : null}
          <button className="primary" onClick={() => void send()} disabled={!p.graphSaved || !text.trim()} data-testid="send">
            Send
          </button>
        </div>
      </div>
    </div>
  )
}
