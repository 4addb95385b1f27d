/** A client going away, as both fronts tell the forwarder (which cancels the upstream request with it). */
import { type AbortSignalLike } from '../proxy/admission.ts'

/**
 * The client going away, as the forwarder listens for it ({@link AbortSignalLike}, with an AbortSignal's
 * semantics: listeners run once, in order, and one removed meanwhile does not run). One per request: an
 * AbortController's signal is an EventTarget, and building one and adding and removing its listeners cost several
 * µs per request.
 */
export class ClientGone implements AbortSignalLike {
  aborted = false
  /** Usually one at a time; a fan-out (the repository index) has one per server. Removed ones are `null`. */
  #listeners: Array<(() => void) | null> = []

  addEventListener (_type: 'abort', listener: () => void): void {
    if (!this.aborted) this.#listeners.push(listener)
  }

  removeEventListener (_type: 'abort', listener: () => void): void {
    const listeners = this.#listeners
    const i = listeners.indexOf(listener)
    if (i === -1) return
    if (this.aborted) listeners[i] = null
    else listeners.splice(i, 1)
  }

  abort (): void {
    if (this.aborted) return
    this.aborted = true
    const listeners = this.#listeners
    for (let i = 0; i < listeners.length; i++) {
      const listener = listeners[i]
      if (listener === null || listener === undefined) continue
      listeners[i] = null
      listener()
    }
    this.#listeners = []
  }
}
