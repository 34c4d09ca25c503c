import { ReactFlowProvider, useReactFlow } from '@xyflow/react'
import { useCallback, useEffect, useMemo, useRef, useState } from 'react'
import { api, ApiError, call, setToken } from './api/client'
import type { Chat, GraphInput, GraphSummary, NodeType } from './api/types'
import { ChatPanel } from './chat/ChatPanel'
import { useChat } from './chat/useChat'
import { Canvas, DND_TYPE } from './editor/Canvas'
import { indexTypes } from './editor/graph'
import { useEditor } from './editor/useEditor'
import { RunInspector } from './inspector/RunInspector'
import { useRun, useSocketStatus } from './stream/store'

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

function Palette({ types, onAdd }: { types: NodeType[]; onAdd: (t: string) => void }) {
  return (
    <div className="palette" data-testid="palette">
      <h4>Nodes</h4>
      {types.map((t) => (
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
    </div>
  )
}

function Shell() {
  const [types, setTypes] = useState<NodeType[]>([])
  const typeIndex = useMemo(() => indexTypes(types), [types])
  const ed = useEditor(typeIndex)
  const rf = useReactFlow()
  const [graphs, setGraphs] = useState<GraphSummary[]>([])
  const [route, setRoute] = useState<Route>(readRoute)
  const [notice, setNotice] = useState<Notice | null>(null)
  const [importing, setImporting] = useState<string | null>(null)
  const [chats, setChats] = useState<Chat[]>([])
  const [inspectRun, setInspectRun] = useState<string | undefined>()
  const [inspectNode, setInspectNode] = useState<string | undefined>()
  const [showInspector, setShowInspector] = useState(true)
  const [needToken, setNeedToken] = useState(false)
  const sockStatus = useSocketStatus()

  const notify = useCallback((text: string, kind: 'error' | 'info' = 'info') => setNotice({ text, kind, at: Date.now() }), [])
  const fail = useCallback(
    (e: unknown) => {
      if (e instanceof ApiError && e.status === 401) setNeedToken(true)
      notify(e instanceof Error ? e.message : String(e), 'error')
    },
    [notify],
  )
  const onChatError = useCallback((m: string) => notify(m, 'error'), [notify])
  const chatApi = useChat(route.c, onChatError)
  const canvasRunId = inspectRun ?? chatApi.lastRunId
  const canvasRun = useRun(canvasRunId)

  const go = useCallback((r: Route) => {
    writeRoute(r)
    setRoute(r)
  }, [])

  const loadGraphs = useCallback(() => call(api.GET('/api/v1/graphs')).then(setGraphs).catch(fail), [fail])
  const loadChats = useCallback(
    (graphId?: string) => {
      if (!graphId) return setChats([])
      call(api.GET('/api/v1/chats', { params: { query: { graphId } } }))
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
        setTimeout(() => rf.fitView({ maxZoom: 1.1 }), 50)
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

  const save = useCallback(async () => {
    const g = ed.wire()
    try {
      const saved = g.id
        ? await call(api.PUT('/api/v1/graphs/{id}', { params: { path: { id: g.id } }, body: g }))
        : await call(api.POST('/api/v1/graphs', { body: g }))
      ed.saved(saved)
      loadedGraph.current = saved.id
      ed.setDiagnostics(saved.diagnostics ?? [], g)
      const warns = saved.diagnostics?.length ?? 0
      notify(warns ? `Saved v${saved.planVersion} with ${warns} warning${warns > 1 ? 's' : ''}` : `Saved v${saved.planVersion}`, 'info')
      if (route.g !== saved.id) go({ g: saved.id })
      void loadGraphs()
      loadChats(saved.id)
      return saved
    } catch (e) {
      if (e instanceof ApiError && e.diagnostics.length) {
        ed.setDiagnostics(e.diagnostics, g)
        const n = e.diagnostics.filter((d) => d.severity === 'error').length
        notify(`Not saved: ${n} problem${n === 1 ? '' : 's'} (shown on the graph)`, 'error')
      } else fail(e)
      return undefined
    }
  }, [ed, notify, fail, go, route.g, loadGraphs, loadChats])

  const validate = useCallback(async () => {
    const g = ed.wire()
    try {
      const r = await call(api.POST('/api/v1/graphs/validate', { body: g }))
      ed.setDiagnostics(r.diagnostics, g)
      notify(r.valid ? (r.diagnostics.length ? `Valid, ${r.diagnostics.length} warning(s)` : 'Valid') : `${r.diagnostics.length} problem(s)`, r.valid ? 'info' : 'error')
    } catch (e) {
      if (e instanceof ApiError && e.diagnostics.length) {
        ed.setDiagnostics(e.diagnostics, g)
        notify(`${e.diagnostics.length} problem(s)`, 'error')
      } else fail(e)
    }
  }, [ed, notify, fail])

  const newGraph = () => {
    if (!confirmDiscard()) return
    loadedGraph.current = undefined
    ed.replace({ nodes: [], edges: [] }, { name: 'Untitled graph' }, { dirty: false })
    go({})
    setChats([])
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

  const addNode = (t: string) => {
    const el = document.querySelector('.canvas')
    const r = el?.getBoundingClientRect()
    const center = r ? { x: r.left + r.width / 2, y: r.top + r.height / 2 } : { x: 400, y: 300 }
    const jitter = (ed.nodes.length % 5) * 30
    ed.addNode(t, rf.screenToFlowPosition({ x: center.x - 90 + jitter, y: center.y - 40 + jitter }))
  }

  const newChat = async () => {
    if (!ed.meta.id) return undefined
    try {
      const c = await call(api.POST('/api/v1/chats', { body: { graphId: ed.meta.id } }))
      go({ g: ed.meta.id, c: c.id })
      loadChats(ed.meta.id)
      return c.id
    } catch (e) {
      fail(e)
      return undefined
    }
  }

  // Undo/redo keys (not while typing in a field).
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      const t = e.target as HTMLElement | null
      if (t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.tagName === 'SELECT' || t.isContentEditable)) return
      const mod = e.ctrlKey || e.metaKey
      if (!mod) return
      const k = e.key.toLowerCase()
      if (k === 'z' && !e.shiftKey) {
        e.preventDefault()
        ed.undo()
      } else if ((k === 'z' && e.shiftKey) || k === 'y') {
        e.preventDefault()
        ed.redo()
      } else if (k === 's') {
        e.preventDefault()
        void save()
      }
    }
    window.addEventListener('keydown', onKey)
    return () => window.removeEventListener('keydown', onKey)
  }, [ed, save])

  useEffect(() => {
    if (!notice) return
    const t = setTimeout(() => setNotice((n) => (n === notice ? null : n)), notice.kind === 'error' ? 12000 : 4000)
    return () => clearTimeout(t)
  }, [notice])

  const agents = useMemo(() => ed.nodes.filter((n) => n.type === 'agent').map((n) => ({ id: n.id, label: String(n.data.name || n.id) })), [ed.nodes])
  const userToolNames = useMemo(() => {
    const s = typeIndex.tool?.dataSchema as { properties?: { name?: { enum?: unknown[] } } } | undefined
    return (s?.properties?.name?.enum ?? []).map(String)
  }, [typeIndex])

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
        <button className="primary" onClick={() => void save()} data-testid="save">
          Save
        </button>
        <button onClick={() => void validate()}>Validate</button>
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
        <button onClick={ed.layout} title="Lay the graph out left to right">
          Layout
        </button>
        <button onClick={() => setImporting('')}>Import</button>
        <button onClick={() => setImporting(JSON.stringify(ed.wire(), null, 2))}>Export</button>
        <span className="sep" />
        <span className={`sock sock-${sockStatus}`} data-testid="socket-status" title="WebSocket">
          ● {sockStatus}
        </span>
      </header>
      {notice && (
        <div className={`notice notice-${notice.kind}`} data-testid="notice" onClick={() => setNotice(null)}>
          {notice.text}
        </div>
      )}
      {ed.diags.graph.length > 0 && (
        <div className="notice notice-error" data-testid="graph-diags">
          {ed.diags.graph.map((d, i) => (
            <div key={i}>
              {d.path ? <code>{d.path}</code> : null} {d.message}
            </div>
          ))}
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
        <Palette types={types} onAdd={addNode} />
        <div className="center">
          <Canvas ed={ed} types={typeIndex} run={canvasRun} onNotice={notify} />
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
          agents={agents}
          userToolNames={userToolNames}
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
            setTimeout(() => rf.fitView({ maxZoom: 1.1 }), 50)
          }}
        />
      )}
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
