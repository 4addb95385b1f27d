/**
 * Watches the fleet file and calls back when it may have changed. Editors and config tools replace a file by
 * writing a new one and renaming it over the old (so a watch on the file itself would follow the old inode and go
 * quiet), which is why the directory is watched and events are filtered by name. Events come in bursts (truncate,
 * write, rename), so they are debounced; the callback reads and validates the file itself, so a spurious call
 * costs one parse.
 */
import { watch, type FSWatcher } from 'node:fs'
import { basename, dirname, resolve } from 'node:path'
import { type Timers } from '../health/types.ts'

/** Long enough to span one save's burst of events, short enough to feel immediate. */
export const RELOAD_DEBOUNCE_MS = 100

export class FleetWatcher {
  readonly #watcher: FSWatcher
  readonly #timers: Timers
  #timer: unknown = undefined
  #closed = false

  /**
   * @param onChange called (debounced) after the file was written, replaced or removed
   * @throws Error when the file's directory cannot be watched
   */
  constructor (path: string, timers: Timers, onChange: () => void, debounceMs = RELOAD_DEBOUNCE_MS) {
    this.#timers = timers
    const file = basename(resolve(path))
    this.#watcher = watch(dirname(resolve(path)), { persistent: false }, (_event, name) => {
      // Some platforms give no name; then any change in the directory may be ours.
      if (this.#closed || (name !== null && name !== file)) return
      timers.clearTimeout(this.#timer)
      this.#timer = timers.setTimeout(() => {
        if (!this.#closed) onChange()
      }, debounceMs)
    })
    // A watcher error (the directory removed) must not crash the gateway; reloads then come from SIGHUP only.
    this.#watcher.on('error', () => { this.close() })
  }

  close (): void {
    if (this.#closed) return
    this.#closed = true
    this.#timers.clearTimeout(this.#timer)
    this.#watcher.close()
  }
}
