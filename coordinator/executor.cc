// The executor: its worker threads (claim, replay, else wait for work), its heartbeat and its
// listener, and stopping them.
#include <spdlog/spdlog.h>

#include <thread>

#include "coordinator/executor_state.h"
#include "coordinator/statements.h"

namespace runledger::coordinator {

void Executor::State::worker_loop() {
  while (!stop) {
    bool worked = false;
    try {
      if (auto claimed = claim()) {
        // More may be due (a burst, or several at one time): another idle worker looks too.
        add_wakeup();
        replay(std::move(*claimed));
        worked = true;
      }
    } catch (const std::exception& e) {
      spdlog::error("coordinator {}: {}", id, e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    if (!worked) wait_for_work();
  }
}

Executor::Executor(std::string database_url, const Registry& registry, std::string id,
                   Options options, ledger::Options ledger_options)
    : state_(std::make_unique<State>(std::move(database_url), registry, std::move(id), options,
                                     ledger_options)) {}

Executor::~Executor() = default;

bool Executor::run_one() {
  auto& s = *state_;
  auto claimed = s.claim();
  if (!claimed) return false;
  std::atomic<bool> quit{false};
  std::jthread heartbeat([&s, &quit] { s.heartbeat_loop(quit); });
  struct StopHeartbeat {
    State& s;
    std::atomic<bool>& quit;
    ~StopHeartbeat() {
      quit = true;
      s.wake.notify_all();
    }
  } stop_heartbeat{s, quit};
  s.replay(std::move(*claimed));
  return true;
}

void Executor::run() {
  auto& s = *state_;
  spdlog::info("coordinator {}: {} threads, workflows: {}", s.id, s.options.threads, s.names);
  // Instances pinned to versions this executor does not run wait for an executor that does:
  // say so, rather than leave them to look stuck.
  try {
    auto conn = s.pool.acquire();
    pqxx::nontransaction tx(*conn);
    for (const auto& row : pg::exec(tx, sql::kOtherVersions, s.names)) {
      spdlog::warn(
          "coordinator {}: {} unfinished instances of workflow {} are pinned to version {}, which "
          "this executor does not run; they wait for an executor that does",
          s.id, row[2].as<std::int64_t>(), row[0].as<std::string>(), row[1].as<int>());
    }
  } catch (const std::exception& e) {
    spdlog::warn("coordinator {}: looking for instances of other versions: {}", s.id, e.what());
  }
  std::vector<std::jthread> threads;
  threads.emplace_back([&s] { s.listen_loop(); });
  const std::atomic<bool> never{false};
  threads.emplace_back([&s, &never] { s.heartbeat_loop(never); });
  for (int i = 0; i < s.options.threads; ++i) threads.emplace_back([&s] { s.worker_loop(); });
  threads.clear();  // joins: every loop ends on stop
  spdlog::info("coordinator {}: stopped", s.id);
}

void Executor::request_stop() {
  state_->stop = true;  // the loops look at it at least every 200 ms
}

}  // namespace runledger::coordinator
