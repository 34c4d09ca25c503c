import { createContext, useContext } from 'react'
import type { RunView } from '../stream/reducer'
import type { DiagnosticMap, TypeIndex } from './graph'
import { LabelLayout } from './labels'

export interface CanvasInfo {
  types: TypeIndex
  run?: RunView
  diags: DiagnosticMap
  /** Handles edges use that the node's type does not declare (shown so the edge and its diagnostic render). */
  extraHandles: Record<string, { in: string[]; out: string[] }>
  /** Where edge labels go so that none covers another. */
  labels: LabelLayout
}

export const CanvasContext = createContext<CanvasInfo>({
  types: {},
  diags: { nodes: {}, edges: {}, graph: [] },
  extraHandles: {},
  labels: new LabelLayout(),
})

export const useCanvas = () => useContext(CanvasContext)
