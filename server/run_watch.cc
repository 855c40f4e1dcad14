// One watcher thread per server for transcript streams and waits on runs (server/context.h).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <unordered_map>

#include "server/context.h"

namespace runledger::server {

RunWatch::RunWatch(ledger::Ledger& ledger, transcript::Store& store,
                   std::chrono::milliseconds interval)
    : ledger_(ledger), store_(store), interval_(interval), thread_([this] { loop(); }) {}

RunWatch::~RunWatch() {
  {
    std::lock_guard lock(mu_);
    exiting_ = true;
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

RunWatch::Id RunWatch::watch(const RunId& run, std::int64_t seen_seq, std::function<void()> wake) {
  std::lock_guard lock(mu_);
  const Id id = next_id_++;
  watchers_.emplace(id, Watcher{run, seen_seq, std::move(wake)});
  cv_.notify_all();
  return id;
}

void RunWatch::cancel(Id id) {
  std::unique_lock lock(mu_);
  watchers_.erase(id);
  woke_.wait(lock, [&] { return waking_ != id; });
}

bool RunWatch::wait(const RunId& run, std::int64_t seen_seq,
                    std::chrono::steady_clock::time_point until) {
  struct Signal {
    std::mutex mu;
    std::condition_variable cv;
    bool woken = false;
  };
  auto signal = std::make_shared<Signal>();
  const Id id = watch(run, seen_seq, [signal] {
    std::lock_guard lock(signal->mu);
    signal->woken = true;
    signal->cv.notify_one();
  });
  {
    std::unique_lock lock(signal->mu);
    signal->cv.wait_until(lock, until, [&] { return signal->woken; });
  }
  cancel(id);
  return !stopping_;
}

void RunWatch::shut_down() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

void RunWatch::wake_locked(std::unique_lock<std::mutex>& lock, Id id) {
  auto it = watchers_.find(id);
  if (it == watchers_.end()) return;  // cancelled meanwhile
  auto wake = std::move(it->second.wake);
  watchers_.erase(it);
  waking_ = id;
  lock.unlock();
  wake();
  lock.lock();
  waking_ = 0;
  woke_.notify_all();
}

void RunWatch::loop() {
  std::unique_lock lock(mu_);
  bool failing = false;
  for (;;) {
    if (stopping_) {
      // Whoever watches, or comes to watch until the destructor, is woken at once.
      while (!watchers_.empty()) wake_locked(lock, watchers_.begin()->first);
      if (exiting_) return;
      cv_.wait(lock, [&] { return exiting_ || !watchers_.empty(); });
      continue;
    }
    if (watchers_.empty()) {
      cv_.wait(lock, [&] { return stopping_ || !watchers_.empty(); });
      continue;
    }
    if (cv_.wait_for(lock, interval_, [&] { return stopping_.load(); })) continue;
    std::vector<RunId> runs;
    for (const auto& [id, w] : watchers_) runs.push_back(w.run);
    const Id read_for = next_id_;  // watches added while reading wait for the next round
    std::sort(runs.begin(), runs.end());
    runs.erase(std::unique(runs.begin(), runs.end()), runs.end());
    lock.unlock();
    // The status first: a run seen terminal has every entry it will ever have, so the reader
    // woken by it, reading after this, sends them all before its end.
    std::unordered_map<std::string, bool> ended;  // run id -> terminal
    std::unordered_map<std::string, std::int64_t> heads;
    bool read = false;
    try {
      for (const auto& [run, status] : ledger_.statuses(runs)) {
        ended[run.value()] = ledger::is_terminal(status);
      }
      for (const auto& [run, seq] : store_.head_seqs(runs)) heads[run.value()] = seq;
      read = true;
      if (failing) spdlog::info("server: the run watch reads the database again");
      failing = false;
    } catch (const std::exception& e) {
      if (!failing) spdlog::warn("server: the run watch cannot read the database: {}", e.what());
      failing = true;
    }
    lock.lock();
    if (!read) continue;
    std::vector<Id> due;
    for (const auto& [id, w] : watchers_) {
      if (id >= read_for) break;  // ordered by id
      const auto status = ended.find(w.run.value());
      const auto head = heads.find(w.run.value());
      const bool gone = status == ended.end() || head == heads.end();
      if (gone || status->second || head->second > w.seen_seq) due.push_back(id);
    }
    for (const Id id : due) wake_locked(lock, id);
  }
}

}  // namespace runledger::server
