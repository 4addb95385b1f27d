/** Backends by the name config.pbtxt's `backend` field uses. */
import { createError } from '../../common/errors.ts'
import { identityBackend } from './identity-backend.ts'
import { jsBackend } from './js-backend.ts'
import { nativeBackend } from './native/native-backend.ts'
import { onnxruntimeBackend } from './onnxruntime-backend.ts'
import { simulatedBackend } from './simulated-backend.ts'
import { type Backend } from './types.ts'

const backends = new Map<string, Backend>([
  [identityBackend.name, identityBackend],
  [jsBackend.name, jsBackend],
  [nativeBackend.name, nativeBackend],
  [onnxruntimeBackend.name, onnxruntimeBackend],
  [simulatedBackend.name, simulatedBackend]
])

export function backendNames (): string[] {
  return [...backends.keys()].sort()
}

/** The backend a model asks for; an unknown name fails that model's load with the list of known ones. */
export function getBackend (name: string, modelName: string): Backend {
  const backend = backends.get(name)
  if (backend === undefined) throw createError('WRK_ERR_UNKNOWN_BACKEND', name, modelName, backendNames().join(', '))
  return backend
}
