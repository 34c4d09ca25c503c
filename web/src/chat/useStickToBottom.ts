// Keeps a scrolling list pinned to its bottom while the person is there:
// whatever grows the content (a new message, a streamed word, markdown
// re-rendering) scrolls it into view. Once they scroll up it stays where
// they put it and says that something new arrived below (`unseen`).
import { useCallback, useEffect, useRef, useState, type RefObject } from 'react'

/** How close to the bottom (px) still counts as "at the bottom". */
const slack = 24

export function useStickToBottom(ref: RefObject<HTMLElement | null>) {
  const stick = useRef(true)
  // The content height when the position was last known to be settled:
  // a scroll up that has not fired its scroll event yet still shows as
  // being above it, so new content never yanks a reader back down.
  const settled = useRef(0)
  const [unseen, setUnseen] = useState(false)

  const toBottom = useCallback(() => {
    const el = ref.current
    if (!el) return
    stick.current = true
    el.scrollTop = el.scrollHeight
    settled.current = el.scrollHeight
    setUnseen(false)
  }, [ref])

  useEffect(() => {
    const el = ref.current
    if (!el) return
    const onScroll = () => {
      const at = el.scrollHeight - el.scrollTop - el.clientHeight <= slack
      stick.current = at
      settled.current = el.scrollHeight
      if (at) setUnseen(false)
    }
    const grew = () => {
      const wasAtBottom = settled.current - el.scrollTop - el.clientHeight <= slack
      if (stick.current && wasAtBottom) {
        el.scrollTop = el.scrollHeight
      } else {
        stick.current = false
        if (el.scrollHeight - el.scrollTop - el.clientHeight > slack) setUnseen(true)
      }
      settled.current = el.scrollHeight
    }
    el.addEventListener('scroll', onScroll, { passive: true })
    const mo = new MutationObserver(grew)
    mo.observe(el, { childList: true, subtree: true, characterData: true })
    const ro = new ResizeObserver(grew)
    ro.observe(el)
    return () => {
      el.removeEventListener('scroll', onScroll)
      mo.disconnect()
      ro.disconnect()
    }
  }, [ref])

  return { unseen, toBottom }
}
