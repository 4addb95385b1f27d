import t from 'tap'
import { describeError } from '../../../gateway/proxy/upstream-errors.ts'

t.test('describeError', async (t) => {
  t.equal(describeError(Object.assign(new Error('connect ECONNREFUSED 1.2.3.4:5'), { code: 'ECONNREFUSED' })), 'connect ECONNREFUSED 1.2.3.4:5')
  t.equal(describeError(Object.assign(new Error(''), { code: 'ECONNRESET' })), 'ECONNRESET')
  t.equal(describeError(new AggregateError([new Error('connect ECONNREFUSED ::1:5')], '')), 'connect ECONNREFUSED ::1:5')
  t.equal(describeError('plain'), 'plain')
})
