// A thread of one's own for a session's runs. Handing a run to libuv's pool costs a futex wake of a sleeping pool
// thread on every call (10-50 us on a shared VM, half of a small model's run); this thread spins a while after each
// job (as the kernel pool's helpers do, FLOTILLA_NATIVE_SPIN_US), so a caller that sends its next run soon after
// the last one finished finds it awake.
#pragma once

#include <functional>
#include <memory>

namespace flotilla {

class Executor {
 public:
  Executor();
  /** Returns at once: jobs already submitted still run, then the thread ends by itself (nothing here joins it). */
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  /** Runs `job` on the executor's thread after the jobs before it. Jobs must not throw (they report their own). */
  void submit(std::function<void()> job);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace flotilla
