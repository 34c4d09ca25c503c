// The subset of JSON Schema node types publish for their data (object of
// scalar properties with type, enum, bounds, lengths, pattern, required,
// default, description): field list for the side panel and validation
// messages. The server validates again on save; this only gives
// immediate feedback.
export interface PropSchema {
  type?: string | string[]
  enum?: unknown[]
  minimum?: number
  maximum?: number
  exclusiveMinimum?: number
  exclusiveMaximum?: number
  minLength?: number
  maxLength?: number
  pattern?: string
  default?: unknown
  /** Suggested values (a text field offers them, other values stay valid). */
  examples?: unknown[]
  description?: string
  title?: string
}

export interface ObjectSchema {
  type?: string
  properties?: Record<string, PropSchema>
  required?: string[]
}

export interface Field {
  name: string
  schema: PropSchema
  required: boolean
  kind: 'boolean' | 'integer' | 'number' | 'enum' | 'text' | 'longtext' | 'json'
}

function typeOf(p: PropSchema): string | undefined {
  return Array.isArray(p.type) ? p.type.find((t) => t !== 'null') : p.type
}

export function fields(schema: unknown): Field[] {
  const s = (schema ?? {}) as ObjectSchema
  const req = new Set(s.required ?? [])
  return Object.entries(s.properties ?? {}).map(([name, p]) => {
    const t = typeOf(p)
    let kind: Field['kind'] = 'json'
    if (p.enum) kind = 'enum'
    else if (t === 'boolean') kind = 'boolean'
    else if (t === 'integer') kind = 'integer'
    else if (t === 'number') kind = 'number'
    else if (t === 'string') kind = (p.maxLength ?? 0) > 300 ? 'longtext' : 'text'
    return { name, schema: p, required: req.has(name), kind }
  })
}

/** Validation messages by field name (only fields with a problem). */
export function validate(schema: unknown, data: Record<string, unknown>): Record<string, string> {
  const s = (schema ?? {}) as ObjectSchema
  const out: Record<string, string> = {}
  for (const name of s.required ?? []) {
    const v = data[name]
    if (v === undefined || v === null || v === '') out[name] = 'required'
  }
  for (const [name, p] of Object.entries(s.properties ?? {})) {
    if (out[name]) continue
    const v = data[name]
    if (v === undefined || v === null) continue
    const msg = check(p, v)
    if (msg) out[name] = msg
  }
  return out
}

function check(p: PropSchema, v: unknown): string | undefined {
  const t = typeOf(p)
  if (p.enum && !p.enum.some((e) => e === v)) return `must be one of ${p.enum.map((e) => JSON.stringify(e)).join(', ')}`
  switch (t) {
    case 'boolean':
      if (typeof v !== 'boolean') return 'must be true or false'
      break
    case 'integer':
    case 'number':
      if (typeof v !== 'number' || !Number.isFinite(v)) return 'must be a number'
      if (t === 'integer' && !Number.isInteger(v)) return 'must be a whole number'
      if (p.minimum !== undefined && v < p.minimum) return `must be at least ${p.minimum}`
      if (p.maximum !== undefined && v > p.maximum) return `must be at most ${p.maximum}`
      if (p.exclusiveMinimum !== undefined && v <= p.exclusiveMinimum) return `must be more than ${p.exclusiveMinimum}`
      if (p.exclusiveMaximum !== undefined && v >= p.exclusiveMaximum) return `must be less than ${p.exclusiveMaximum}`
      break
    case 'string':
      if (typeof v !== 'string') return 'must be text'
      if (p.minLength !== undefined && [...v].length < p.minLength) return p.minLength === 1 ? 'must not be empty' : `must be at least ${p.minLength} characters`
      if (p.maxLength !== undefined && [...v].length > p.maxLength) return `must be at most ${p.maxLength} characters`
      if (p.pattern) {
        try {
          if (!new RegExp(p.pattern, 'u').test(v)) return `must match ${p.pattern}`
        } catch {
          /* a pattern JS cannot read: the server decides */
        }
      }
      break
    case 'object':
      if (typeof v !== 'object' || Array.isArray(v)) return 'must be an object'
      break
    case 'array':
      if (!Array.isArray(v)) return 'must be a list'
      break
  }
  return undefined
}

/**
 * Parses what a person typed into a field of this kind: numbers stay the
 * typed text when they do not parse, so the message can say so.
 */
export function parseInput(f: Field, text: string): unknown {
  if (f.kind === 'integer' || f.kind === 'number') {
    if (text.trim() === '') return undefined
    const n = Number(text)
    return Number.isNaN(n) ? text : n
  }
  if (f.kind === 'enum') {
    if (text === '') return undefined
    const hit = f.schema.enum?.find((e) => String(e) === text)
    return hit === undefined ? text : hit
  }
  if (f.kind === 'text' || f.kind === 'longtext') return text === '' ? undefined : text
  return text
}
