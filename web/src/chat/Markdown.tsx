// Assistant answers as markdown (GitHub flavour: tables, lists, strike,
// autolinks) through react-markdown, which builds React elements and
// never sets innerHTML. Raw HTML in an answer is shown as the text it is
// (the htmlAsText plugin below), so a <script> or an onerror attribute
// can never run; link URLs go through react-markdown's default filter
// (javascript: and other unsafe schemes become empty).
import { useRef, useState, type ComponentProps, type ReactNode } from 'react'
import ReactMarkdown from 'react-markdown'
import remarkGfm from 'remark-gfm'
import { copyText } from './copy'

interface MdNode {
  type: string
  value?: string
  children?: MdNode[]
}

/** A remark plugin: raw HTML nodes become text nodes (shown, not parsed). */
function htmlAsText() {
  const walk = (n: MdNode) => {
    if (n.type === 'html') n.type = 'text'
    n.children?.forEach(walk)
  }
  return (tree: MdNode) => walk(tree)
}

export function CopyButton({ text, label = 'Copy', testId }: { text: () => string; label?: string; testId?: string }) {
  const [done, setDone] = useState<'' | 'ok' | 'fail'>('')
  return (
    <button
      type="button"
      className="link copy"
      data-testid={testId}
      onClick={async () => {
        setDone((await copyText(text())) ? 'ok' : 'fail')
        setTimeout(() => setDone(''), 1500)
      }}
    >
      {done === 'ok' ? 'Copied' : done === 'fail' ? 'Copy failed' : label}
    </button>
  )
}

function CodeBlock({ children, node: _node, ...rest }: ComponentProps<'pre'> & { node?: unknown }) {
  const ref = useRef<HTMLPreElement>(null)
  return (
    <div className="code-block">
      <CopyButton text={() => ref.current?.textContent ?? ''} label="Copy code" testId="copy-code" />
      <pre ref={ref} {...rest}>
        {children as ReactNode}
      </pre>
    </div>
  )
}

function Link({ children, node: _node, ...rest }: ComponentProps<'a'> & { node?: unknown }) {
  return (
    <a {...rest} target="_blank" rel="noopener noreferrer">
      {children}
    </a>
  )
}

const plugins = [remarkGfm, htmlAsText]
const components = { pre: CodeBlock, a: Link }

export function Markdown({ text }: { text: string }) {
  return (
    <div className="md">
      <ReactMarkdown remarkPlugins={plugins} components={components}>
        {text}
      </ReactMarkdown>
    </div>
  )
}
