// The executor's instance leases: extended every lease_ttl / 3 while replaying; an instance whose
// lease was not extended is lost, and its replay stops.
#include <spdlog/spdlog.h>

#include <set>

#include "coordinator/executor_state.h"
#include "coordinator/statements.h"

namespace runledger::coordinator {

void Executor::State::heartbeat_loop(const std::atomic<bool>& quit) {
  const auto every = options.lease_ttl / 3;
  auto next_beat = std::chrono::steady_clock::now() + every;
  std::unique_lock lock(mu);
  while (!stop && !quit) {
    wake.wait_for(lock, std::min<std::chrono::milliseconds>(every, std::chrono::milliseconds(200)));
    if (stop || quit) return;
    if (std::chrono::steady_clock::now() < next_beat) continue;
    next_beat = std::chrono::steady_clock::now() + every;
    json leases = json::array();
    std::map<std::string, std::shared_ptr<std::atomic<bool>>> flags;
    for (const auto& [instance, h] : held) {
      leases.push_back({{"instance_id", instance}, {"generation", h.generation.value()}});
      flags[instance] = h.lost;
    }
    if (flags.empty()) continue;
    lock.unlock();
    try {
      auto conn = pool.acquire();
      pqxx::nontransaction tx(*conn);
      std::set<std::string> kept;
      for (const auto& row : pg::exec(tx, sql::kHeartbeat, leases.dump(),
                                      static_cast<std::int64_t>(options.lease_ttl.count()))) {
        kept.insert(row[0].as<std::string>());
      }
      std::lock_guard held_lock(mu);
      for (const auto& [instance, flag] : flags) {
        if (kept.contains(instance)) continue;
        // A replay that ended since the snapshot released its lease itself: not lost.
        const auto it = held.find(instance);
        if (it == held.end() || it->second.lost != flag) continue;
        spdlog::warn("coordinator {}: lost instance {}; its replay stops", id, instance);
        *flag = true;
      }
    } catch (const std::exception& e) {
      spdlog::error("coordinator {}: heartbeat failed: {}", id, e.what());
    }
    lock.lock();
  }
}

}  // namespace runledger::coordinator
