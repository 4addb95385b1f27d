#include "thread_pool.h"

#include <chrono>
#include <cstdlib>

namespace flotilla {

// A model runs op after op, each a parallel region of tens of microseconds: a helper that went to sleep on a futex
// after each one takes 10-50 us to wake for the next. So helpers spin a while after a region before sleeping
// (onnxruntime's intra-op pool spins too), and the caller spins while it waits for the last task.
std::chrono::microseconds nativeSpinTime() {
  static const std::chrono::microseconds spin = [] {
    const char* env = std::getenv("FLOTILLA_NATIVE_SPIN_US");
    const long us = env != nullptr ? std::atol(env) : 30;
    return std::chrono::microseconds(us < 0 ? 0 : us);
  }();
  return spin;
}

ThreadPool::ThreadPool(int threads) : size_(threads < 1 ? 1 : threads) {
  for (int i = 1; i < size_; i++) workers_.emplace_back([this] { workerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::runTasks() {
  active_.fetch_add(1);
  const int64_t tasks = tasks_.load();
  if (tasks > 0) {
    const std::function<void(int64_t)>* fn = fn_.load();
    for (;;) {
      const int64_t t = next_.fetch_add(1);
      if (t >= tasks) break;
      (*fn)(t);
      finished_.fetch_add(1);
    }
  }
  active_.fetch_sub(1);
}

void ThreadPool::parallelFor(int64_t tasks, const std::function<void(int64_t)>& fn) {
  if (tasks <= 0) return;
  // One region at a time: a session that finds the pool busy computes alone rather than waiting, so two sessions
  // on two executor threads still use both cores between them.
  std::unique_lock<std::mutex> region(regionMutex_, std::try_to_lock);
  if (tasks == 1 || size_ == 1 || !region.owns_lock()) {
    for (int64_t t = 0; t < tasks; t++) fn(t);
    return;
  }
  fn_.store(&fn);
  finished_.store(0);
  next_.store(0);
  tasks_.store(tasks);
  {
    // Under the mutex, so a helper between its last check and its wait cannot miss the new generation.
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (sleeping_.load(std::memory_order_acquire) > 0) wake_.notify_all();
  runTasks();
  int step = 0;
  while (finished_.load() < tasks) relaxWait(step);
  tasks_.store(0);
  while (active_.load() > 0) relaxWait(step);
  fn_.store(nullptr);
}

void ThreadPool::workerLoop() {
  uint64_t seen = generation_.load(std::memory_order_acquire);
  for (;;) {
    const auto spinUntil = std::chrono::steady_clock::now() + nativeSpinTime();
    uint64_t now = generation_.load(std::memory_order_acquire);
    while (now == seen && !stop_.load(std::memory_order_relaxed)) {
      if (std::chrono::steady_clock::now() >= spinUntil) {
        std::unique_lock<std::mutex> lock(mutex_);
        sleeping_.fetch_add(1, std::memory_order_acq_rel);
        wake_.wait(lock, [&] { return stop_.load() || generation_.load(std::memory_order_acquire) != seen; });
        sleeping_.fetch_sub(1, std::memory_order_acq_rel);
      } else {
        int step = 0;
        for (int i = 0; i < 64; i++) relaxWait(step);
      }
      now = generation_.load(std::memory_order_acquire);
    }
    if (stop_.load()) return;
    seen = now;
    runTasks();
  }
}

ThreadPool& defaultThreadPool() {
  static ThreadPool pool([] {
    const char* env = std::getenv("FLOTILLA_NATIVE_THREADS");
    int n = env != nullptr ? std::atoi(env) : 0;
    if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
    return n <= 0 ? 1 : n;
  }());
  return pool;
}

}  // namespace flotilla
