// Light or dark: follows the system setting (prefers-color-scheme) until
// the person picks one with the toggle; the pick is kept in localStorage.
// The resolved theme is written to <html data-theme>, which styles.css
// keys its colours on.
import { useCallback, useEffect, useState } from 'react'

export type ThemeMode = 'system' | 'light' | 'dark'
export type Theme = 'light' | 'dark'

const KEY = 'chatgraph.theme'
const order: ThemeMode[] = ['system', 'light', 'dark']

function storedMode(): ThemeMode {
  const v = localStorage.getItem(KEY)
  return v === 'light' || v === 'dark' ? v : 'system'
}

const dark = () => window.matchMedia('(prefers-color-scheme: dark)')

function resolve(mode: ThemeMode): Theme {
  if (mode !== 'system') return mode
  return dark().matches ? 'dark' : 'light'
}

/** Applies the stored theme before the first render (no light flash). */
export function applyStoredTheme() {
  document.documentElement.dataset.theme = resolve(storedMode())
}

export function useTheme() {
  const [mode, setMode] = useState<ThemeMode>(storedMode)
  const [theme, setTheme] = useState<Theme>(() => resolve(storedMode()))

  useEffect(() => {
    const apply = () => {
      const t = resolve(mode)
      setTheme(t)
      document.documentElement.dataset.theme = t
    }
    apply()
    if (mode !== 'system') return
    const mq = dark()
    mq.addEventListener('change', apply)
    return () => mq.removeEventListener('change', apply)
  }, [mode])

  /** system -> light -> dark -> system. */
  const cycle = useCallback(() => {
    setMode((m) => {
      const next = order[(order.indexOf(m) + 1) % order.length]
      if (next === 'system') localStorage.removeItem(KEY)
      else localStorage.setItem(KEY, next)
      return next
    })
  }, [])

  return { mode, theme, cycle }
}
