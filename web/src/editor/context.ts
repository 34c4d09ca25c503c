import { createContext, useContext } from 'react'
import type { RunView } from '../stream/reducer'
import type { DiagnosticMap, TypeIndex } from './graph'

export interface CanvasInfo {
  types: TypeIndex
  run?: RunView
  diags: DiagnosticMap
  /** Handles edges use that the node's type does not declare (shown so the edge and its diagnostic render). */
  extraHandles: Record<string, { in: string[]; out: string[] }>
}

export const CanvasContext = createContext<CanvasInfo>({
  types: {},
  diags: { nodes: {}, edges: {}, graph: [] },
  extraHandles: {},
})

export const useCanvas = () => useContext(CanvasContext)
