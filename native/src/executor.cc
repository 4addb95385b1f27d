#include "executor.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "thread_pool.h"

namespace flotilla {

// Shared by the handle and the thread, so the handle can go (a session closed, its wrapper collected) while the
// thread still drains what was submitted, without the JavaScript thread ever waiting for a run to end.
struct Executor::State {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::function<void()>> jobs;
  std::atomic<size_t> queued{0};  // jobs.size(), readable without the mutex while spinning
  bool sleeping = false;
  bool stop = false;

  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mutex);
        if (jobs.empty()) {
          if (stop) return;
          lock.unlock();
          spinForJob();
          lock.lock();
          while (jobs.empty() && !stop) {
            sleeping = true;
            wake.wait(lock);
            sleeping = false;
          }
          if (jobs.empty()) return;
        }
        job = std::move(jobs.front());
        jobs.pop_front();
        queued.fetch_sub(1, std::memory_order_relaxed);
      }
      job();
    }
  }

  /** Waits up to the spin time for a job without sleeping. */
  void spinForJob() {
    const auto until = std::chrono::steady_clock::now() + nativeSpinTime();
    int step = 0;
    while (queued.load(std::memory_order_acquire) == 0) {
      relaxWait(step);
      if ((step & 63) == 0 && std::chrono::steady_clock::now() >= until) return;
    }
  }
};

Executor::Executor() : state_(std::make_shared<State>()) {
  std::thread([state = state_] { state->loop(); }).detach();
}

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
  }
  state_->wake.notify_one();
}

void Executor::submit(std::function<void()> job) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->jobs.push_back(std::move(job));
    state_->queued.fetch_add(1, std::memory_order_release);
    wake = state_->sleeping;
  }
  if (wake) state_->wake.notify_one();
}

}  // namespace flotilla
