/**
 * A model's `instance_group` list turned into the instances to create, as Triton's core does
 * (model_config_utils.cc normalisation, backend_model.cc instance creation; triton-behaviour.md §2): `count`
 * instances per group, and for GPU groups `count` instances on each listed GPU. Pure: the GPUs present and whether
 * the backend can use them are passed in, so every case is tested without a device.
 */
import { createError } from '../../common/errors.ts'
import { type Backend, type InstanceSpec } from '../backends/types.ts'
import { type InstanceGroup } from '../repository/types.ts'

/** A CUDA device as the native module's `devices()` lists it (issue 6); only what instance placement needs. */
export interface GpuDevice {
  readonly id: number
  readonly name: string
}

/** Lists the GPUs this worker may use; the default lists none, until the native module provides `devices()`. */
export type DeviceLister = () => readonly GpuDevice[]

export const noDevices: DeviceLister = () => []

/** Whether `backend` declares that it runs instances on GPUs. Backends that say nothing are CPU only. */
export function backendSupportsGpu (backend: Backend): boolean {
  return backend.supportsGpu === true
}

export interface PlacementOptions {
  readonly modelName: string
  /** The GPUs present. */
  readonly devices: readonly GpuDevice[]
  /** Whether the model's backend can run on a GPU; decides where KIND_AUTO groups go. */
  readonly backendSupportsGpu: boolean
  /** The backend's name, for messages. */
  readonly backendName: string
}

export interface Placement {
  /** One per instance, in Triton's creation order: groups in config order, then count, then GPU. */
  readonly specs: InstanceSpec[]
  /** At most one line, for the caller to log as a warning: KIND_AUTO groups that fell back to CPU and why. */
  readonly warnings: string[]
}

function deviceList (devices: readonly GpuDevice[]): string {
  return devices.map(d => `${d.id} (${d.name})`).join(', ')
}

/**
 * The instances of a model version. Throws WRK_ERR_MODEL_LOAD (the version fails to load) when a KIND_GPU group
 * finds no GPU, or when a group lists a GPU that is not present. Instance names are Triton's `<group>_<i>`; the
 * instances of one `i` on several GPUs share the name and differ by device, as in Triton.
 */
export function placeInstances (groups: readonly InstanceGroup[], options: PlacementOptions): Placement {
  const { modelName, backendName } = options
  const devices = [...options.devices].sort((a, b) => a.id - b.id)
  const present = new Set(devices.map(d => d.id))
  const specs: InstanceSpec[] = []
  const fellBack: string[] = []

  for (const group of groups) {
    let kind = group.kind
    if (kind === 'KIND_AUTO') {
      if (devices.length > 0 && options.backendSupportsGpu) {
        kind = 'KIND_GPU'
      } else {
        kind = 'KIND_CPU'
        fellBack.push(group.name)
      }
    }

    if (kind === 'KIND_GPU') {
      if (devices.length === 0) {
        throw createError('WRK_ERR_MODEL_LOAD', modelName,
          `instance group '${group.name}' has kind KIND_GPU, but no GPU is available to this worker; ` +
          'use kind KIND_CPU, or KIND_AUTO to use a GPU only when there is one, or run the worker on a machine with a GPU')
      }
      for (const id of group.gpus) {
        if (!present.has(id)) {
          throw createError('WRK_ERR_MODEL_LOAD', modelName,
            `instance group '${group.name}' specifies gpu id ${id}, which is not available to this worker ` +
            `(GPUs: ${deviceList(devices)}); list only those ids in 'gpus', or leave 'gpus' out to use every GPU`)
        }
      }
      // No `gpus`: every GPU, as Triton's normalisation fills them in.
      const gpus = group.gpus.length > 0 ? group.gpus : devices.map(d => d.id)
      for (let i = 0; i < group.count; i++) {
        for (const deviceId of gpus) specs.push({ name: `${group.name}_${i}`, kind: 'KIND_GPU', deviceId })
      }
      continue
    }

    const cpuKind = kind === 'KIND_MODEL' ? 'KIND_MODEL' : 'KIND_CPU'
    for (let i = 0; i < group.count; i++) specs.push({ name: `${group.name}_${i}`, kind: cpuKind, deviceId: -1 })
  }

  const warnings: string[] = []
  if (fellBack.length > 0) {
    const names = fellBack.map(n => `'${n}'`).join(', ')
    const why = devices.length === 0
      ? 'no GPU is available to this worker'
      : `backend '${backendName}' does not run on GPUs`
    warnings.push(`KIND_AUTO instance group${fellBack.length > 1 ? 's' : ''} ${names} of model '${modelName}' ` +
      `run${fellBack.length > 1 ? '' : 's'} on CPU: ${why}`)
  }
  return { specs, warnings }
}
