import { ReactFlowProvider, useReactFlow } from '@xyflow/react'
import { useCallback, useEffect, useMemo, useRef, useState, type RefObject } from 'react'
import { allPages, api, ApiError, call, setToken } from './api/client'
import type { Chat, GraphInput, GraphSummary, NodeType } from './api/types'
import { ChatPanel } from './chat/ChatPanel'
import { useChat } from './chat/useChat'
import { allowedUserTools } from './chat/userTools'
import { Canvas, DND_TYPE, placeNew } from './editor/Canvas'
import type { FlowEdge, FlowNode } from './editor/graph'
import { indexTypes } from './editor/graph'
import { suggestions, templates, type Template } from './editor/templates'
import { useEditor } from './editor/useEditor'
import { RunInspector } from './inspector/RunInspector'
import { ShortcutSheet } from './ShortcutSheet'
import { socket, useRun, useSocketStatus } from './stream/store'
import { useTheme } from './theme'
import { codeText, diagnosticText, socketWords } from './wording'

interface Route {
  g?: string
  c?: string
}

function readRoute(): Route {
  const p = new URLSearchParams(location.hash.replace(/^#/, ''))
  return { g: p.get('g') ?? undefined, c: p.get('c') ?? undefined }
}

function writeRoute(r: Route) {
  const p = new URLSearchParams()
  if (r.g) p.set('g', r.g)
  if (r.c) p.set('c', r.c)
  const h = p.toString()
  history.replaceState(null, '', h ? `#${h}` : location.pathname + location.search)
}

interface Notice {
  text: string
  kind: 'error' | 'info'
  at: number
  /** The raw code behind the words, for the tooltip. */
  code?: string
}

/** Is the key event's target a field a person types into? */
function typing(t: EventTarget | null): boolean {
  const el = t as HTMLElement | null
  return !!el && (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA' || el.tagName === 'SELECT' || el.isContentEditable)
}

function ImportDialog({ initial, onImport, onClose }: { initial: string; onImport: (g: GraphInput) => void; onClose: () => void }) {
  const [text, setText] = useState(initial)
  const [err, setErr] = useState('')
  return (
    <div className="dialog-backdrop" onClick={onClose}>
      <div className="dialog" onClick={(e) => e.stopPropagation()} data-testid="import-dialog">
        <h3>Graph JSON</h3>
        <p className="muted">Paste a graph (React Flow shape) to import it; nodes without positions are laid out.</p>
        <textarea aria-label="graph json" value={text} onChange={(e) => setText(e.target.value)} rows={16} />
        <input
          type="file"
          accept="application/json,.json"
          onChange={async (e) => {
            const f = e.target.files?.[0]
            if (f) setText(await f.text())
          }}
        />
        {err && <div className="field-error">{err}</div>}
        <div className="dialog-actions">
          <button
            className="primary"
            onClick={() => {
              try {
                const g = JSON.parse(text) as GraphInput
                if (!g || typeof g !== 'object' || !Array.isArray(g.nodes)) throw new Error('expected {"nodes": [...], "edges": [...]}')
                onImport(g)
              } catch (e) {
                setErr(e instanceof Error ? e.message : String(e))
              }
            }}
          >
            Import
          </button>
          <button onClick={onClose}>Close</button>
        </div>
      </div>
    </div>
  )
}

function Palette({ types, onAdd, search }: { types: NodeType[]; onAdd: (t: string) => void; search: RefObject<HTMLInputElement | null> }) {
  const [q, setQ] = useState('')
  const needle = q.trim().toLowerCase()
  // Names that start with the text first, then names that contain it, then descriptions.
  const rank = (t: NodeType) => {
    const names = [t.type, t.label ?? ''].map((x) => x.toLowerCase())
    if (names.some((n) => n.startsWith(needle))) return 0
    if (names.some((n) => n.includes(needle))) return 1
    return (t.description ?? '').toLowerCase().includes(needle) ? 2 : 3
  }
  const shown = needle
    ? types
        .map((t) => ({ t, r: rank(t) }))
        .filter((x) => x.r < 3)
        .sort((a, b) => a.r - b.r)
        .map((x) => x.t)
    : types
  return (
    <div className="palette" data-testid="palette">
      <h4>Nodes</h4>
      <input
        ref={search}
        className="palette-search"
        type="search"
        aria-label="search nodes"
        placeholder="Search nodes  ( / )"
        value={q}
        onChange={(e) => setQ(e.target.value)}
        onKeyDown={(e) => {
          if (e.key === 'Enter' && shown[0]) {
            onAdd(shown[0].type)
            setQ('')
          }
          if (e.key === 'Escape' && q) {
            e.stopPropagation()
            setQ('')
          }
        }}
      />
      {shown.length === 0 && <div className="muted">No node type matches “{q}”.</div>}
      {shown.map((t) => (
        <button
          key={t.type}
          className="palette-item"
          draggable
          onDragStart={(e) => {
            e.dataTransfer.setData(DND_TYPE, t.type)
            e.dataTransfer.effectAllowed = 'move'
          }}
          onClick={() => onAdd(t.type)}
          title={t.description}
          data-testid={`palette-${t.type}`}
        >
          <span className="palette-label">{t.label ?? t.type}</span>
          <span className="palette-ports">
            {t.ports.map((p) => (
              <span key={`${p.direction}${p.name}`} className={`pp pp-${p.channel}`}>
                {p.direction === 'in' ? '›' : ''}
                {p.name}
                {p.direction === 'out' ? '›' : ''}
              </span>
            ))}
          </span>
        </button>
      ))}
      <p className="palette-hint muted">Click to add in free space, or drag onto the canvas.</p>
    </div>
  )
}

function TemplatesMenu({ onPick }: { onPick: (t: Template) => void }) {
  const [open, setOpen] = useState(false)
  const ref = useRef<HTMLDivElement>(null)
  useEffect(() => {
    if (!open) return
    const off = (e: PointerEvent) => {
      if (!ref.current?.contains(e.target as Node)) setOpen(false)
    }
    const esc = (e: KeyboardEvent) => {
      if (e.key === 'Escape') setOpen(false)
    }
    window.addEventListener('pointerdown', off)
    window.addEventListener('keydown', esc)
    return () => {
      window.removeEventListener('pointerdown', off)
      window.removeEventListener('keydown', esc)
    }
  }, [open])
  return (
    <div className="menu" ref={ref}>
      <button onClick={() => setOpen(!open)} aria-haspopup="menu" aria-expanded={open} data-testid="templates-button">
        Templates ▾
      </button>
      {open && (
        <div className="menu-list" role="menu" data-testid="templates-menu">
          {templates.map((t) => (
            <button
              key={t.id}
              role="menuitem"
              className="menu-item"
              onClick={() => {
                setOpen(false)
                onPick(t)
              }}
              data-testid={`template-${t.id}`}
            >
              <b>{t.name}</b>
              <span className="muted">{t.description}</span>
            </button>
          ))}
        </div>
      )}
    </div>
  )
}

function ThemeToggle({ mode, onCycle }: { mode: string; onCycle: () => void }) {
  const icon = mode === 'dark' ? '☾' : mode === 'light' ? '☀' : '◐'
  const what = mode === 'system' ? 'follows the system setting' : mode
  return (
    <button onClick={onCycle} title={`Theme: ${what} (click to change)`} aria-label={`theme: ${what}`} data-testid="theme-toggle" data-mode={mode}>
      {icon}
    </button>
  )
}

function Shell() {
  const [types, setTypes] = useState<NodeType[]>([])
  const typeIndex = useMemo(() => indexTypes(types), [types])
  const ed = useEditor(typeIndex)
  const rf = useReactFlow<FlowNode, FlowEdge>()
  const { mode, theme, cycle } = useTheme()
  const [graphs, setGraphs] = useState<GraphSummary[]>([])
  const [route, setRoute] = useState<Route>(readRoute)
  const [notice, setNotice] = useState<Notice | null>(null)
  const [importing, setImporting] = useState<string | null>(null)
  const [chats, setChats] = useState<Chat[]>([])
  const [inspectRun, setInspectRun] = useState<string | undefined>()
  const [inspectNode, setInspectNode] = useState<string | undefined>()
  const [showInspector, setShowInspector] = useState(true)
  const [needToken, setNeedToken] = useState(false)
  const [sheet, setSheet] = useState(false)
  const [fitRequest, setFitRequest] = useState(0)
  const paletteSearch = useRef<HTMLInputElement>(null)
  const sockStatus = useSocketStatus()

  const notify = useCallback((text: string, kind: 'error' | 'info' = 'info', code?: string) => setNotice({ text, kind, at: Date.now(), code }), [])
  const fail = useCallback(
    (e: unknown) => {
      if (e instanceof ApiError && e.status === 401) setNeedToken(true)
      if (e instanceof ApiError) notify(e.message || codeText(e.code), 'error', e.code)
      else notify(e instanceof Error ? e.message : String(e), 'error')
    },
    [notify],
  )
  const onChatError = useCallback((m: string) => notify(m, 'error'), [notify])
  const chatApi = useChat(route.c, onChatError)
  const canvasRunId = inspectRun ?? chatApi.lastRunId
  const canvasRun = useRun(canvasRunId)
  const fitSoon = useCallback(() => setFitRequest((n) => n + 1), [])

  const go = useCallback((r: Route) => {
    writeRoute(r)
    setRoute(r)
  }, [])

  const loadGraphs = useCallback(() => allPages(api.GET('/api/v1/graphs', { params: { query: { limit: 1000 } } })).then(setGraphs).catch(fail), [fail])
  const loadChats = useCallback(
    (graphId?: string) => {
      if (!graphId) return setChats([])
      allPages(api.GET('/api/v1/chats', { params: { query: { graphId, limit: 1000 } } }))
        .then(setChats)
        .catch(fail)
    },
    [fail],
  )

  useEffect(() => {
    call(api.GET('/api/v1/node-types')).then(setTypes).catch(fail)
    void loadGraphs()
  }, [fail, loadGraphs])

  // Open the graph the URL names (on load and after a reload).
  const loadedGraph = useRef<string | undefined>(undefined)
  useEffect(() => {
    if (!route.g || loadedGraph.current === route.g) return
    loadedGraph.current = route.g
    call(api.GET('/api/v1/graphs/{id}', { params: { path: { id: route.g } } }))
      .then((g) => {
        ed.load(g)
        fitSoon()
      })
      .catch(fail)
    loadChats(route.g)
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [route.g])

  useEffect(() => {
    setInspectRun(undefined)
    setInspectNode(undefined)
  }, [route.c])

  // A change of chat title list when a chat is created.
  useEffect(() => {
    if (chatApi.chat && !chats.some((c) => c.id === chatApi.chat!.id)) loadChats(route.g)
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [chatApi.chat?.id])

  const confirmDiscard = () => !ed.dirty || confirm('Discard unsaved changes?')

  // Checks of the graph: Save and Validate, and the re-check after every
  // edit once one of them ran (undo and redo included). Only the newest
  // answer is applied.
  const checkSeq = useRef(0)

  const save = useCallback(async () => {
    const g = ed.wire()
    const seq = ++checkSeq.current
    try {
      const saved = g.id
        ? await call(api.PUT('/api/v1/graphs/{id}', { params: { path: { id: g.id } }, body: g }))
        : await call(api.POST('/api/v1/graphs', { body: g }))
      ed.saved(saved)
      loadedGraph.current = saved.id
      if (seq === checkSeq.current) ed.setDiagnostics(saved.diagnostics ?? [], g)
      const warns = saved.diagnostics?.length ?? 0
      notify(warns ? `Saved v${saved.planVersion} with ${warns} warning${warns > 1 ? 's' : ''}` : `Saved v${saved.planVersion}`, 'info')
      if (route.g !== saved.id) go({ g: saved.id })
      void loadGraphs()
      loadChats(saved.id)
      return saved
    } catch (e) {
      if (e instanceof ApiError && e.diagnostics.length) {
        if (seq === checkSeq.current) ed.setDiagnostics(e.diagnostics, g)
        const n = e.diagnostics.filter((d) => d.severity === 'error').length
        notify(`Not saved: ${n} problem${n === 1 ? '' : 's'} (shown on the graph)`, 'error', e.code)
      } else fail(e)
      return undefined
    }
  }, [ed, notify, fail, go, route.g, loadGraphs, loadChats])

  const check = useCallback(
    async (quiet: boolean) => {
      const g = ed.wire()
      const seq = ++checkSeq.current
      try {
        const r = await call(api.POST('/api/v1/graphs/validate', { body: g }))
        if (seq !== checkSeq.current) return
        ed.setDiagnostics(r.diagnostics, g)
        if (!quiet) notify(r.valid ? (r.diagnostics.length ? `Valid, ${r.diagnostics.length} warning(s)` : 'Valid') : `${r.diagnostics.length} problem(s)`, r.valid ? 'info' : 'error')
      } catch (e) {
        if (seq !== checkSeq.current) return
        if (e instanceof ApiError && e.diagnostics.length) {
          ed.setDiagnostics(e.diagnostics, g)
          if (!quiet) notify(`${e.diagnostics.length} problem(s)`, 'error', e.code)
        } else if (!quiet) fail(e)
      }
    },
    [ed, notify, fail],
  )

  // What a check looks at: the graph without positions (moving a node
  // changes nothing a check says).
  const structure = useMemo(() => {
    const g = ed.wire()
    return JSON.stringify({ ...g, nodes: g.nodes?.map((n) => ({ ...n, position: undefined })) })
  }, [ed])
  const checkedRef = useRef(ed.checked)
  checkedRef.current = ed.checked
  const checkRef = useRef(check)
  checkRef.current = check
  const lastStructure = useRef(structure)
  const recheck = useRef<ReturnType<typeof setTimeout> | undefined>(undefined)
  useEffect(() => {
    if (structure === lastStructure.current) return
    lastStructure.current = structure
    if (!checkedRef.current) return
    // A burst of edits (typing) is checked once, a moment after it ends.
    clearTimeout(recheck.current)
    recheck.current = setTimeout(() => void checkRef.current(true), 250)
  }, [structure])
  useEffect(() => () => clearTimeout(recheck.current), [])

  const newGraph = () => {
    if (!confirmDiscard()) return
    loadedGraph.current = undefined
    ed.replace({ nodes: [], edges: [] }, { name: 'Untitled graph' }, { dirty: false })
    go({})
    setChats([])
  }

  const loadTemplate = (t: Template) => {
    if (!confirmDiscard()) return
    loadedGraph.current = undefined
    ed.replace(structuredClone(t.graph), { name: t.name }, { dirty: true })
    go({})
    setChats([])
    fitSoon()
    notify(`${t.name}: save it (Ctrl+S), then chat with it on the right.`)
  }

  const openGraph = (id: string) => {
    if (!id || id === ed.meta.id || !confirmDiscard()) return
    go({ g: id })
  }

  const duplicate = async () => {
    const g = ed.wire()
    delete g.id
    g.name = `${ed.meta.name} (copy)`
    try {
      const saved = await call(api.POST('/api/v1/graphs', { body: g }))
      notify(`Duplicated as ${saved.name}`)
      void loadGraphs()
      loadedGraph.current = undefined
      go({ g: saved.id })
    } catch (e) {
      if (e instanceof ApiError && e.diagnostics.length) ed.setDiagnostics(e.diagnostics, g)
      fail(e)
    }
  }

  const remove = async () => {
    const id = ed.meta.id
    if (!id || !confirm(`Delete graph "${ed.meta.name}"?`)) return
    try {
      await call(api.DELETE('/api/v1/graphs/{id}', { params: { path: { id } } }))
      notify('Deleted')
      loadedGraph.current = undefined
      ed.replace({ nodes: [], edges: [] }, { name: 'Untitled graph' }, { dirty: false })
      go({})
      setChats([])
      void loadGraphs()
    } catch (e) {
      fail(e)
    }
  }

  const rename = async (name: string) => {
    if (name === ed.meta.name) return
    ed.setMeta({ ...ed.meta, name })
    ed.setDirty(true)
  }

  const addNode = (t: string) => ed.addNode(t, placeNew(rf, ed.nodes))

  const newChat = async (title?: string) => {
    if (!ed.meta.id) return undefined
    try {
      const c = await call(api.POST('/api/v1/chats', { body: { graphId: ed.meta.id, ...(title ? { title } : {}) } }))
      go({ g: ed.meta.id, c: c.id })
      loadChats(ed.meta.id)
      return c.id
    } catch (e) {
      fail(e)
      return undefined
    }
  }

  // Keys. Ctrl/Cmd+S saves from anywhere, fields included; Esc closes
  // what is open (the sheet, then the side panel); the others wait until
  // the person is not typing in a field.
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      const mod = e.ctrlKey || e.metaKey
      const k = e.key.toLowerCase()
      if (mod && k === 's' && !e.shiftKey && !e.altKey) {
        e.preventDefault()
        void save()
        return
      }
      if (e.key === 'Escape') {
        if (sheet) setSheet(false)
        else if (importing !== null) setImporting(null)
        else ed.clearSelection()
        return
      }
      if (typing(e.target)) return
      if (e.key === '?' && !mod) {
        e.preventDefault()
        setSheet(true)
        return
      }
      if (e.key === '/' && !mod) {
        e.preventDefault()
        paletteSearch.current?.focus()
        return
      }
      if (!mod) return
      if (k === 'z' && !e.shiftKey) {
        e.preventDefault()
        ed.undo()
      } else if ((k === 'z' && e.shiftKey) || k === 'y') {
        e.preventDefault()
        ed.redo()
      }
    }
    window.addEventListener('keydown', onKey)
    return () => window.removeEventListener('keydown', onKey)
  }, [ed, save, sheet, importing])

  useEffect(() => {
    if (!notice) return
    const t = setTimeout(() => setNotice((n) => (n === notice ? null : n)), notice.kind === 'error' ? 12000 : 4000)
    return () => clearTimeout(t)
  }, [notice])

  const agents = useMemo(() => ed.nodes.filter((n) => n.type === 'agent').map((n) => ({ id: n.id, label: String(n.data.name || n.id) })), [ed.nodes])
  // The registered tools a user may enable here (allowedUserTools): the
  // server refuses the others.
  // (A string key: node statuses change while a run streams, the lists
  // rarely, and the tool list must keep its identity meanwhile.)
  const toolLists = useMemo(
    () =>
      JSON.stringify(
        ed.nodes.filter((n) => n.type === 'chat_start' && Array.isArray(n.data.userTools)).map((n) => (n.data.userTools as unknown[]).map(String)),
      ),
    [ed.nodes],
  )
  const userToolNames = useMemo(() => {
    const s = typeIndex.tool?.dataSchema as { properties?: { name?: { enum?: unknown[] } } } | undefined
    const all = (s?.properties?.name?.enum ?? []).map(String)
    const safe = new Set((typeIndex.tool?.tools ?? []).filter((t) => t.safe).map((t) => t.name))
    return allowedUserTools(all, JSON.parse(toolLists) as string[][], safe)
  }, [typeIndex, toolLists])
  const tries = useMemo(() => suggestions(ed.nodes, ed.edges), [ed.nodes, ed.edges])

  return (
    <div className="app">
      <header className="topbar">
        <span className="brand">chatgraph</span>
        <select aria-label="graph" value={ed.meta.id ?? ''} onChange={(e) => openGraph(e.target.value)} data-testid="graph-select">
          <option value="">{ed.meta.id ? '' : '(unsaved graph)'}</option>
          {graphs.map((g) => (
            <option key={g.id} value={g.id}>
              {g.name || g.id}
            </option>
          ))}
        </select>
        <input
          aria-label="graph name"
          className="graph-name"
          value={ed.meta.name}
          onChange={(e) => void rename(e.target.value)}
          data-testid="graph-name"
        />
        {ed.meta.planVersion !== undefined && <span className="muted">v{ed.meta.planVersion}</span>}
        {ed.dirty && <span className="dirty" title="unsaved changes">●</span>}
        <button onClick={newGraph}>New</button>
        <TemplatesMenu onPick={loadTemplate} />
        <button className="primary" onClick={() => void save()} data-testid="save" title="Save (Ctrl+S)">
          Save
        </button>
        <button onClick={() => void check(false)}>Validate</button>
        <button onClick={() => void duplicate()} disabled={!ed.nodes.length}>
          Duplicate
        </button>
        <button onClick={() => void remove()} disabled={!ed.meta.id} className="danger">
          Delete
        </button>
        <span className="sep" />
        <button onClick={ed.undo} disabled={!ed.canUndo} title="Undo (Ctrl+Z)" data-testid="undo">
          Undo
        </button>
        <button onClick={ed.redo} disabled={!ed.canRedo} title="Redo (Ctrl+Shift+Z)" data-testid="redo">
          Redo
        </button>
        <button
          onClick={() => {
            ed.layout()
            fitSoon()
          }}
          title="Lay the graph out left to right"
        >
          Layout
        </button>
        <button onClick={() => setImporting('')}>Import</button>
        <button onClick={() => setImporting(JSON.stringify(ed.wire(), null, 2))}>Export</button>
        <span className="spacer" />
        <ThemeToggle mode={mode} onCycle={cycle} />
        <button onClick={() => setSheet(true)} title="Keyboard shortcuts (?)" aria-label="keyboard shortcuts" data-testid="shortcuts-button">
          ?
        </button>
        <span
          className={`sock sock-${sockStatus}`}
          data-testid="socket-status"
          data-status={sockStatus}
          data-mode={socket.mode}
          title={socket.mode === 'sse' ? `HTTP + SSE (the WebSocket cannot connect): ${sockStatus}` : `WebSocket: ${sockStatus}`}
        >
          ● {socketWords[sockStatus] ?? sockStatus}
        </span>
      </header>
      {notice && (
        <div className={`toast notice-${notice.kind}`} role="status" data-testid="notice" title={notice.code} onClick={() => setNotice(null)}>
          {notice.text}
        </div>
      )}
      {needToken && (
        <div className="notice notice-error">
          This server needs a token:{' '}
          <input
            type="password"
            onKeyDown={(e) => {
              if (e.key === 'Enter') {
                setToken((e.target as HTMLInputElement).value)
                location.reload()
              }
            }}
          />
        </div>
      )}
      <div className="main">
        <Palette types={types} onAdd={addNode} search={paletteSearch} />
        <div className="center">
          {ed.diags.graph.length > 0 && (
            <div className="notice notice-error" data-testid="graph-diags">
              {ed.diags.graph.map((d, i) => (
                <div key={i} title={[d.code, d.path].filter(Boolean).join(' ')}>
                  {diagnosticText(d)}
                </div>
              ))}
            </div>
          )}
          <Canvas ed={ed} types={typeIndex} run={canvasRun} theme={theme} fitRequest={fitRequest} onTemplate={loadTemplate} />
          <div className={`drawer ${showInspector ? 'open' : ''}`}>
            <div className="drawer-head" onClick={() => setShowInspector(!showInspector)}>
              {showInspector ? '▾' : '▸'} Run inspector
              {inspectRun && (
                <button
                  className="link"
                  onClick={(e) => {
                    e.stopPropagation()
                    setInspectRun(undefined)
                  }}
                >
                  follow latest
                </button>
              )}
            </div>
            {showInspector && (
              <RunInspector
                chatId={route.c}
                runId={canvasRunId}
                onSelectRun={setInspectRun}
                nodeId={inspectNode ?? ed.nodes.find((n) => n.selected)?.id}
                onSelectNode={setInspectNode}
              />
            )}
          </div>
        </div>
        <ChatPanel
          chatApi={chatApi}
          chatId={route.c}
          chats={chats}
          onSelectChat={(c) => go({ g: route.g, c })}
          onNewChat={newChat}
          graphSaved={!!ed.meta.id}
          graphDirty={ed.dirty}
          graphEmpty={ed.nodes.length === 0}
          onSaveGraph={() => void save()}
          agents={agents}
          userToolNames={userToolNames}
          suggestions={tries}
          onInspect={(id) => {
            setInspectRun(id)
            setShowInspector(true)
          }}
        />
      </div>
      {importing !== null && (
        <ImportDialog
          initial={importing}
          onClose={() => setImporting(null)}
          onImport={(g) => {
            if (!confirmDiscard()) return
            loadedGraph.current = undefined
            ed.replace(g, { name: typeof g.name === 'string' && g.name ? g.name : 'Imported graph' }, { dirty: true })
            go({})
            setChats([])
            setImporting(null)
            fitSoon()
          }}
        />
      )}
      {sheet && <ShortcutSheet onClose={() => setSheet(false)} />}
    </div>
  )
}

export function App() {
  return (
    <ReactFlowProvider>
      <Shell />
    </ReactFlowProvider>
  )
}
