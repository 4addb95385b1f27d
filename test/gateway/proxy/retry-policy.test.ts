import t from 'tap'
import { backoffMs, DEFAULT_RETRY_SETTINGS, RetryBudget } from '../../../gateway/proxy/retry-policy.ts'

t.test('backoff: full jitter under a doubling ceiling capped at backoff_max_ms; none after a connect failure', async (t) => {
  const s = DEFAULT_RETRY_SETTINGS
  const top = (retry: number): number => backoffMs(retry, 'unavailable', s, () => 0.999999)
  t.strictSame([1, 2, 3, 4, 5, 10].map(top), [24, 49, 99, 199, 249, 249])
  t.equal(backoffMs(1, 'reset', s, () => 0), 0, 'the draw can be zero')
  t.equal(backoffMs(3, 'unavailable', s, () => 0.5), 50)
  t.equal(backoffMs(1, 'connect_failure', s, () => 0.9), 0, 'nothing reached a server: retry at once')
})

t.test('budget: retries in progress at most budget_percent of requests in progress, never below min_concurrent', async (t) => {
  const budget = new RetryBudget({ ...DEFAULT_RETRY_SETTINGS, budgetPercent: 20, minConcurrent: 3 })
  for (let i = 0; i < 20; i++) budget.requestStarted()
  t.ok(budget.tryStartRetry() && budget.tryStartRetry() && budget.tryStartRetry(), 'three under the floor')
  t.ok(budget.tryStartRetry(), '20% of 20 is 4')
  t.notOk(budget.tryStartRetry(), 'the fifth is over budget')
  t.equal(budget.retries, 4)
  budget.retryFinished()
  t.ok(budget.tryStartRetry(), 'a finished retry frees its slot')
  for (let i = 0; i < 30; i++) budget.requestStarted()
  while (budget.tryStartRetry());
  t.equal(budget.retries, 10, 'more requests in progress, more retries: 20% of 50 is 10')
  t.notOk(budget.tryStartRetry())

  const none = new RetryBudget({ ...DEFAULT_RETRY_SETTINGS, budgetPercent: 0, minConcurrent: 0 })
  none.requestStarted()
  t.notOk(none.tryStartRetry(), 'a zero budget allows no retry')
})
