// The keyboard shortcut sheet (`?`). Ctrl stands for Cmd on a Mac.
const mac = typeof navigator !== 'undefined' && /Mac|iPhone|iPad/.test(navigator.platform)
const mod = mac ? '⌘' : 'Ctrl'

const groups: { title: string; keys: [string[], string][] }[] = [
  {
    title: 'Editor',
    keys: [
      [[mod, 'S'], 'Save the graph (also while typing in a field)'],
      [[mod, 'Z'], 'Undo'],
      [[mod, 'Shift', 'Z'], 'Redo (also Ctrl+Y)'],
      [['Delete'], 'Delete the selected nodes and edges (also Backspace)'],
      [['Esc'], 'Close the side panel, this sheet or a menu'],
      [['Shift', 'click'], 'Select several nodes'],
      [['/'], 'Search the node palette'],
      [['Enter'], 'In the palette search: add the first match'],
    ],
  },
  {
    title: 'Chat',
    keys: [
      [['Enter'], 'Send the message'],
      [['Shift', 'Enter'], 'New line in the message'],
    ],
  },
  { title: 'Help', keys: [[['?'], 'This sheet']] },
]

export function ShortcutSheet({ onClose }: { onClose: () => void }) {
  return (
    <div className="dialog-backdrop" onClick={onClose}>
      <div className="dialog shortcuts" role="dialog" aria-label="keyboard shortcuts" onClick={(e) => e.stopPropagation()} data-testid="shortcut-sheet">
        <h3>Keyboard shortcuts</h3>
        {groups.map((g) => (
          <section key={g.title}>
            <h4>{g.title}</h4>
            <table>
              <tbody>
                {g.keys.map(([keys, what]) => (
                  <tr key={what}>
                    <td className="keys">
                      {keys.map((k, i) => (
                        <span key={k}>
                          {i > 0 && ' + '}
                          <kbd>{k}</kbd>
                        </span>
                      ))}
                    </td>
                    <td>{what}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </section>
        ))}
        <div className="dialog-actions">
          <button onClick={onClose}>Close (Esc)</button>
        </div>
      </div>
    </div>
  )
}
