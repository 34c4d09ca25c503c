// The properties panel, docked at the right of the canvas (it takes room
// from the canvas instead of covering it). Its left edge drags to resize
// (also with the arrow keys when focused); the width is kept in
// localStorage. Esc closes it (App's key handler), so does its ✕.
import { useCallback, useRef, useState, type ReactNode } from 'react'

const KEY = 'chatgraph.panelWidth'
const min = 240
const max = 640

function storedWidth(): number {
  const v = Number(localStorage.getItem(KEY))
  return Number.isFinite(v) && v >= min && v <= max ? v : 300
}

export function SidePanel({ children }: { children: ReactNode }) {
  const [width, setWidth] = useState(storedWidth)
  const drag = useRef<{ x: number; w: number } | null>(null)

  const set = useCallback((w: number) => {
    const c = Math.round(Math.min(max, Math.max(min, w)))
    setWidth(c)
    localStorage.setItem(KEY, String(c))
  }, [])

  return (
    <aside className="side-panel" style={{ width }} data-testid="side-panel">
      <div
        className="side-resize"
        role="separator"
        aria-orientation="vertical"
        aria-label="resize the panel"
        aria-valuenow={width}
        aria-valuemin={min}
        aria-valuemax={max}
        tabIndex={0}
        data-testid="panel-resize"
        onPointerDown={(e) => {
          e.currentTarget.setPointerCapture(e.pointerId)
          drag.current = { x: e.clientX, w: width }
        }}
        onPointerMove={(e) => {
          if (drag.current) set(drag.current.w + (drag.current.x - e.clientX))
        }}
        onPointerUp={() => (drag.current = null)}
        onPointerCancel={() => (drag.current = null)}
        onKeyDown={(e) => {
          if (e.key === 'ArrowLeft') set(width + 20)
          if (e.key === 'ArrowRight') set(width - 20)
        }}
      />
      <div className="side-body">{children}</div>
    </aside>
  )
}
