/**
 * Picks a model version's scheduler from its config, once, as Triton's `SetConfiguredScheduler` does: the dynamic
 * batcher when the config has `dynamic_batching`, else the default scheduler (one request at a time per instance,
 * in arrival order).
 */
import { DefaultScheduler } from './default-scheduler.ts'
import { DynamicBatcher } from './dynamic-batcher.ts'
import { type Scheduler, type SchedulerOptions } from './types.ts'

export function createScheduler (options: SchedulerOptions): Scheduler {
  return options.config.dynamic_batching !== undefined ? new DynamicBatcher(options) : new DefaultScheduler(options)
}
