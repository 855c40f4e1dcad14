// Long-polling claims: one LISTEN per server, one waiter woken per new run.
#include <spdlog/spdlog.h>

#include "server/context.h"

namespace runledger::server {

ClaimWaiters::ClaimWaiters(std::string database_url)
    : database_url_(std::move(database_url)), listener_([this] { listen_loop(); }) {}

ClaimWaiters::~ClaimWaiters() {
  shut_down();
  listener_.join();
}

void ClaimWaiters::listen_loop() {
  while (!stopping_) {
    try {
      pqxx::connection conn(database_url_);
      struct Receiver : pqxx::notification_receiver {
        Receiver(pqxx::connection& c, ClaimWaiters& w)
            : notification_receiver(c, "runledger_runs"), waiters(w) {}
        void operator()(const std::string&, int) override {
          ++waiters.wakeups_;
          waiters.wake_one();
        }
        ClaimWaiters& waiters;
      } receiver(conn, *this);
      while (!stopping_) conn.await_notification(0, 200'000);
    } catch (const std::exception& e) {
      if (stopping_) return;
      // The waiters' own polls find what a lost notification would have announced.
      spdlog::warn("server: LISTEN runledger_runs: {}; claims poll meanwhile", e.what());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
}

void ClaimWaiters::wake_one() {
  std::lock_guard lock(mu_);
  for (Waiter* w : waiters_) {
    if (!w->woken) {
      w->woken = true;
      w->cv.notify_one();
      return;
    }
  }
}

void ClaimWaiters::wake_slot(const std::string& slot) {
  std::lock_guard lock(mu_);
  for (Waiter* w : waiters_) {
    if (w->slot == slot) {
      w->woken = true;
      w->cv.notify_one();
    }
  }
}

void ClaimWaiters::shut_down() {
  std::lock_guard lock(mu_);
  stopping_ = true;
  for (Waiter* w : waiters_) {
    w->woken = true;
    w->cv.notify_one();
  }
}

bool ClaimWaiters::wait(const std::string& slot, std::chrono::steady_clock::time_point until) {
  Waiter me;
  me.slot = slot;
  std::unique_lock lock(mu_);
  if (stopping_) return false;
  waiters_.push_back(&me);
  me.cv.wait_until(lock, until, [&] { return me.woken; });
  waiters_.remove(&me);
  return !stopping_;
}

}  // namespace runledger::server
