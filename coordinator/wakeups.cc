// When the executor's idle workers wake: on NOTIFY runledger_wf, at the earliest due time, or
// after poll_interval.
#include <spdlog/spdlog.h>

#include <thread>

#include "coordinator/executor_state.h"
#include "coordinator/statements.h"

namespace runledger::coordinator {

void Executor::State::listen_loop() {
  while (!stop) {
    try {
      pqxx::connection conn(database_url);
      struct Receiver : pqxx::notification_receiver {
        Receiver(pqxx::connection& c, State& s)
            : notification_receiver(c, "runledger_wf"), state(s) {}
        void operator()(const std::string&, int) override { state.add_wakeup(); }
        State& state;
      } receiver(conn, *this);
      // Anything that happened before LISTEN took effect is found by the workers' next look.
      add_wakeup();
      while (!stop) conn.await_notification(0, 200'000);
    } catch (const std::exception& e) {
      if (stop) return;
      spdlog::warn("coordinator {}: LISTEN runledger_wf: {}; polling meanwhile", id, e.what());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
}

void Executor::State::wait_for_work() {
  const auto take_wakeup = [&] {
    if (wakeups == 0) return false;
    --wakeups;
    return true;
  };
  {
    std::lock_guard lock(mu);
    if (take_wakeup()) return;
  }
  std::int64_t wait_ms = options.poll_interval.count();
  // The due time is measured from the query's start: the wait is too.
  const auto asked = std::chrono::steady_clock::now();
  try {
    auto conn = pool.acquire();
    pqxx::nontransaction tx(*conn);
    const auto rows = pg::exec(tx, sql::kNextDue, names);
    if (!rows.empty() && !rows[0][0].is_null()) {
      const std::int64_t due_in = rows[0][0].as<std::int64_t>();
      // Due now but not claimable (another executor holds it, or a claim raced ours): look again
      // shortly. Else wake when it is due (rounded up: waking early finds nothing).
      wait_ms = due_in <= 0 ? 20 : std::min(due_in, wait_ms);
    }
  } catch (const std::exception& e) {
    spdlog::error("coordinator {}: looking for due instances: {}", id, e.what());
  }
  auto until = asked + std::chrono::milliseconds(wait_ms);
  std::unique_lock lock(mu);
  // One idle worker sleeps until the earliest due time; the others until a notification or the
  // poll. Woken all at once, they would all claim, and on 2 cores the losers' queries slow the
  // winner's replay (the wake latency of a due sleep).
  bool timed = false;
  if (wait_ms < options.poll_interval.count()) {
    if (!timed_wake || until < *timed_wake) {
      timed_wake = until;
      timed = true;
    } else {
      until = asked + options.poll_interval;
    }
  }
  bool woken = false;
  while (!stop && std::chrono::steady_clock::now() < until) {
    if (take_wakeup()) {
      woken = true;
      break;
    }
    if (!timed && retime) {  // the timed worker left early: recompute, and take its place
      retime = false;
      break;
    }
    work.wait_until(
        lock, std::min(until, std::chrono::steady_clock::now() + std::chrono::milliseconds(200)));
  }
  if (timed && timed_wake == until) {
    timed_wake.reset();
    if (woken) {
      retime = true;
      lock.unlock();
      work.notify_one();
    }
  }
}

}  // namespace runledger::coordinator
