// Typed HTTP calls (openapi-fetch over the generated paths) and the bearer
// token shared with the WebSocket.
import createClient from 'openapi-fetch'
import type { paths } from './openapi.gen'
import type { ApiErrorBody, Diagnostic } from './types'

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
