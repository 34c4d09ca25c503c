// Typed HTTP calls (openapi-fetch over the generated paths) and the bearer
// token shared with the WebSocket.
import createClient from 'openapi-fetch'
import type { paths } from './openapi.gen'
import type { ApiErrorBody, Chat, Diagnostic, Message } from './types'

const TOKEN_KEY = 'chatgraph.token'

/**
 * The bearer token, kept in sessionStorage (this tab, until it closes). A
 * ?token= in the page URL is taken once and removed from the address bar,
 * so it stays out of the history and of Referer headers.
 */
export function token(): string {
  const url = new URL(location.href)
  const fromUrl = url.searchParams.get('token')
  if (fromUrl) {
    sessionStorage.setItem(TOKEN_KEY, fromUrl)
    url.searchParams.delete('token')
    history.replaceState(history.state, '', url.pathname + url.search + url.hash)
    return fromUrl
  }
  // A token an older version kept in localStorage moves to this tab.
  const legacy = localStorage.getItem(TOKEN_KEY)
  if (legacy !== null) {
    localStorage.removeItem(TOKEN_KEY)
    if (legacy && !sessionStorage.getItem(TOKEN_KEY)) sessionStorage.setItem(TOKEN_KEY, legacy)
  }
  return sessionStorage.getItem(TOKEN_KEY) ?? ''
}

export function setToken(t: string) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t)
  else sessionStorage.removeItem(TOKEN_KEY)
}

/** An answer of the API that is not 2xx. */
export class ApiError extends Error {
  readonly status: number
  readonly code: string
  readonly details: unknown
  constructor(status: number, body: Partial<ApiErrorBody> | undefined) {
    super(body?.message ?? `HTTP ${status}`)
    this.status = status
    this.code = body?.code ?? 'internal'
    this.details = body?.details
  }
  /** The graph diagnostics an invalid_graph answer carries. */
  get diagnostics(): Diagnostic[] {
    return this.code === 'invalid_graph' && Array.isArray(this.details) ? (this.details as Diagnostic[]) : []
  }
}

export const api = createClient<paths>({ baseUrl: '' })

api.use({
  onRequest({ request }) {
    const t = token()
    if (t) request.headers.set('Authorization', `Bearer ${t}`)
    return request
  },
})

/** Unwraps an openapi-fetch result: the data, or an ApiError. */
export async function call<T>(p: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  const { data, error, response } = await p
  if (!response.ok) {
    const body = (error as { error?: ApiErrorBody } | undefined)?.error
    throw new ApiError(response.status, body)
  }
  return data as T
}

/** The target of a `Link: <url>; rel="next"` header, or undefined. */
export function nextLink(link: string | null | undefined): string | undefined {
  if (!link) return undefined
  for (const part of link.split(',')) {
    const m = /^\s*<([^>]*)>(.*)$/.exec(part)
    if (m && /;\s*rel="?next"?\s*(;|$)/.test(m[2])) return m[1]
  }
  return undefined
}

/** A GET with the bearer token: how the pages a Link names are read. */
export type PageGetter = (url: string) => Promise<Response>

const authGet: PageGetter = (url) => {
  const t = token()
  return fetch(url, { headers: t ? { Authorization: `Bearer ${t}` } : {} })
}

/** The items of the pages that follow a page, reading each `Link: rel="next"` in turn (at most maxPages). */
export async function followPages<T>(link: string | null, get: PageGetter = authGet, maxPages = 10000): Promise<T[]> {
  const items: T[] = []
  let next = nextLink(link)
  for (let n = 0; next && n < maxPages; n++) {
    const resp = await get(next)
    const body = await resp.json().catch(() => undefined)
    if (!resp.ok) throw new ApiError(resp.status, (body as { error?: ApiErrorBody } | undefined)?.error)
    items.push(...(body as T[]))
    next = nextLink(resp.headers.get('Link'))
  }
  return items
}

/** Every item of a paged list route: the first page, then the pages its Link headers name. */
export async function allPages<T>(first: Promise<{ data?: T[]; error?: unknown; response: Response }>, get: PageGetter = authGet): Promise<T[]> {
  const r = await first
  const items = await call(Promise.resolve(r))
  return [...items, ...(await followPages<T>(r.response.headers.get('Link'), get))]
}

/**
 * A chat with all its messages: GET /chats/{id} embeds the first 1000 and,
 * for a longer chat, names the pages of GET /chats/{id}/messages that
 * hold the rest.
 */
export async function loadChat(id: string, get: PageGetter = authGet): Promise<Chat> {
  const r = await api.GET('/api/v1/chats/{id}', { params: { path: { id } } })
  const c = await call(Promise.resolve(r))
  const rest = await followPages<Message>(r.response.headers.get('Link'), get)
  return rest.length ? { ...c, messages: [...(c.messages ?? []), ...rest], messagesCursor: undefined } : c
}
