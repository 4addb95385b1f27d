/**
 * The fleet file watcher on a real directory. File system events arrive in real time; the debounce runs on a fake
 * clock, so how many callbacks a burst gives does not depend on how fast the machine is.
 */
import { mkdtempSync, renameSync, rmSync, unlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { FleetWatcher, RELOAD_DEBOUNCE_MS } from '../../../gateway/fleet/fleet-watcher.ts'
import { FakeClock } from '../../helpers/fake-clock.ts'

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/** A temp directory with a fleet file, and a watcher on it counting callbacks and debounce timers set. */
function watched (t: Test) {
  const dir = mkdtempSync(join(tmpdir(), 'flotilla-watch-'))
  const file = join(dir, 'fleet.yaml')
  writeFileSync(file, 'inference_servers: []\n')
  const clock = new FakeClock()
  let scheduled = 0
  const timers = {
    now: clock.now,
    clearTimeout: clock.clearTimeout,
    setTimeout: (fn: () => void, ms: number): unknown => { scheduled++; return clock.setTimeout(fn, ms) }
  }
  let calls = 0
  const watcher = new FleetWatcher(file, timers, () => { calls++ })
  t.teardown(() => {
    watcher.close()
    rmSync(dir, { recursive: true, force: true })
  })
  /** Waits (real time) until the watcher has seen at least `n` events of ours since the start, then lets stragglers in. */
  const eventsSeen = async (n = 1): Promise<void> => {
    for (let i = 0; i < 200 && scheduled < n; i++) await sleep(10)
    await sleep(50)
  }
  return { dir, file, clock, watcher, calls: () => calls, scheduled: () => scheduled, eventsSeen }
}

t.test('a burst of writes calls back once, after the debounce', async (t) => {
  const { file, clock, calls, scheduled, eventsSeen } = watched(t)
  // Watches start asynchronously on some platforms; give it a moment before the first write.
  await sleep(20)
  for (let i = 0; i < 5; i++) writeFileSync(file, `inference_servers: [] # ${i}\n`)
  await eventsSeen()
  t.ok(scheduled() >= 1, `events seen (${scheduled()})`)
  t.equal(clock.pending, 1, 'every event restarted the one debounce timer')
  await clock.advance(RELOAD_DEBOUNCE_MS - 1)
  t.equal(calls(), 0, 'not before the debounce is over')
  await clock.advance(1)
  t.equal(calls(), 1, 'once for the whole burst')
  await clock.advance(10_000)
  t.equal(calls(), 1)
})

t.test('each event pushes the callback back by the debounce', async (t) => {
  const { file, clock, calls, scheduled, eventsSeen } = watched(t)
  await sleep(20)
  writeFileSync(file, 'a: 1\n')
  await eventsSeen()
  await clock.advance(RELOAD_DEBOUNCE_MS - 10)
  const before = scheduled()
  writeFileSync(file, 'a: 2\n')
  await eventsSeen(before + 1)
  await clock.advance(RELOAD_DEBOUNCE_MS - 10)
  t.equal(calls(), 0, 'the second write restarted the wait')
  await clock.advance(10)
  t.equal(calls(), 1)
})

t.test('an atomic replace (write a temp file, rename it over) calls back once', async (t) => {
  const { dir, file, clock, calls, scheduled, eventsSeen } = watched(t)
  await sleep(20)
  const temp = join(dir, '.fleet.yaml.tmp')
  writeFileSync(temp, 'inference_servers: [] # new\n')
  renameSync(temp, file)
  await eventsSeen()
  t.ok(scheduled() >= 1)
  await clock.advance(RELOAD_DEBOUNCE_MS)
  t.equal(calls(), 1)

  // And the watch still works on the new inode.
  const again = scheduled()
  writeFileSync(file, 'inference_servers: [] # newer\n')
  await eventsSeen(again + 1)
  await clock.advance(RELOAD_DEBOUNCE_MS)
  t.equal(calls(), 2, 'a later write to the replaced file is seen too')
})

t.test('other files in the directory are ignored', async (t) => {
  const { dir, file, clock, calls, scheduled, eventsSeen } = watched(t)
  await sleep(20)
  writeFileSync(join(dir, 'other.yaml'), 'x: 1\n')
  writeFileSync(join(dir, 'fleet.yaml.bak'), 'x: 1\n')
  unlinkSync(join(dir, 'other.yaml'))
  await sleep(150)
  t.equal(scheduled(), 0, 'no debounce started')
  await clock.advance(1000)
  t.equal(calls(), 0)
  writeFileSync(file, 'inference_servers: [] # mine\n')
  await eventsSeen()
  await clock.advance(RELOAD_DEBOUNCE_MS)
  t.equal(calls(), 1, 'while the fleet file itself is still watched')
})

t.test('nothing is called back after close()', async (t) => {
  const { file, clock, watcher, calls, scheduled, eventsSeen } = watched(t)
  await sleep(20)
  writeFileSync(file, 'a: 1\n')
  await eventsSeen()
  t.equal(clock.pending, 1)
  watcher.close()
  t.equal(clock.pending, 0, 'the pending debounce is cancelled')
  await clock.advance(1000)
  t.equal(calls(), 0, 'a write just before close is not reported after it')
  const before = scheduled()
  writeFileSync(file, 'a: 2\n')
  await sleep(150)
  await clock.advance(1000)
  t.equal(scheduled(), before, 'writes after close start nothing')
  t.equal(calls(), 0)
  watcher.close()
  t.pass('closing twice is harmless')
})

t.test('a directory that does not exist cannot be watched', async (t) => {
  const clock = new FakeClock()
  t.throws(() => new FleetWatcher(join(tmpdir(), 'flotilla-no-such-dir-' + String(process.pid), 'fleet.yaml'), clock, () => {}))
})
