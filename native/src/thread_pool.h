// A small fork-join pool for splitting one kernel across cores. Sessions run on their own executor threads, several at
// once; a parallel region that finds the pool busy runs on its caller alone instead of queueing behind another one.
#pragma once

#include <immintrin.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace flotilla {

class ThreadPool {
 public:
  /** `threads` counts the caller: 1 means no helper threads. */
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }
  /**
   * Calls fn(task) for task in [0, tasks), spread over the pool's threads (the caller takes part), and returns when
   * all are done. Falls back to running them all on the caller when another region holds the pool.
   */
  void parallelFor(int64_t tasks, const std::function<void(int64_t)>& fn);

 private:
  void workerLoop();
  void runTasks();
  int size_;
  std::vector<std::thread> workers_;
  std::mutex regionMutex_;       // one parallel region at a time
  std::mutex mutex_;             // guards sleeping on wake_
  std::condition_variable wake_;
  std::atomic<const std::function<void(int64_t)>*> fn_{nullptr};
  // tasks_ > 0 while a region is open; active_ counts threads inside runTasks, which the caller waits out before it
  // returns, so a helper that woke late can never run a task of the next region with this one's function.
  std::atomic<int64_t> tasks_{0};
  std::atomic<int> active_{0};
  std::atomic<int64_t> next_{0};
  std::atomic<int64_t> finished_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
};

/**
 * How long an idle thread (a pool helper, a session's executor) spins for new work before it sleeps: waking a thread
 * that sleeps on a futex costs 10-50 us here, more than many ops take. FLOTILLA_NATIVE_SPIN_US (default 30; 0:
 * sleep at once).
 */
std::chrono::microseconds nativeSpinTime();

/**
 * One step of a wait loop: a few pauses, then yielding the CPU. On two vCPUs the thread being waited for may share
 * this one (the session's executor, the pool's helper, the JS thread); a pure pause loop then burns the time slice
 * the other thread needs, which halved whole benchmark runs.
 */
inline void relaxWait(int& step) {
  if (++step < 64) {
    _mm_pause();
  } else {
    std::this_thread::yield();
  }
}

/** The process-wide pool, sized to the machine's cores (FLOTILLA_NATIVE_THREADS overrides). */
ThreadPool& defaultThreadPool();

}  // namespace flotilla
