import t from 'tap'
import { selectVersions } from '../../../worker/repository/model-repository.ts'

t.test('version policies select as Triton does', async t => {
  const available = [3, 1, 10, 2]
  t.strictSame(selectVersions({ latest: { num_versions: 1 } }, available), [10])
  t.strictSame(selectVersions({ latest: { num_versions: 2 } }, available), [3, 10], 'numeric, not lexical, order')
  t.strictSame(selectVersions({ latest: { num_versions: 9 } }, available), [1, 2, 3, 10])
  t.strictSame(selectVersions({ all: {} }, available), [1, 2, 3, 10])
  t.strictSame(selectVersions({ specific: { versions: [2, 7, 10] } }, available), [2, 10], 'missing versions are skipped')
  t.strictSame(selectVersions({ all: {} }, []), [])
})
