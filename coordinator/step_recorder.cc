// Step records in batches: the first caller to find no batch in flight writes everything queued
// (its own row among it), and whoever is still queued when it ends writes the next batch.
#include "coordinator/step_recorder.h"

#include <utility>

#include "coordinator/rows.h"
#include "coordinator/statements.h"
#include "errors/errors.h"

namespace runledger::coordinator {

StepRecorder::StepRecorder(pg::Pool& pool, std::size_t max_batch)
    : pool_(pool), max_batch_(max_batch < 1 ? 1 : max_batch) {}

std::optional<bool> StepRecorder::record(const StepRow& row) {
  Pending mine;
  mine.row = &row;
  std::unique_lock lock(mu_);
  queue_.push_back(&mine);
  if (gathering_ && queue_.size() >= last_batch_) arrived_.notify_one();
  for (;;) {
    done_.wait(lock, [&] { return mine.done || !writing_; });
    if (mine.done) break;
    // Nobody is writing: this caller writes the oldest queued rows, its own among them unless
    // more than max_batch_ came before it (then it goes round again).
    writing_ = true;
    // The writers of the last batch were woken together and are on their way back (a step body
    // between two records): give them a moment to join, or this batch would be a batch of one
    // and theirs would wait for it. A lone writer (last batch of one) never waits.
    if (last_batch_ > 1 && queue_.size() < last_batch_) {
      gathering_ = true;
      arrived_.wait_for(lock, kGatherWait, [&] { return queue_.size() >= last_batch_; });
      gathering_ = false;
    }
    std::vector<Pending*> batch;
    while (!queue_.empty() && batch.size() < max_batch_) {
      batch.push_back(queue_.front());
      queue_.pop_front();
    }
    lock.unlock();
    write(batch);
    lock.lock();
    for (Pending* p : batch) p->done = true;
    last_batch_ = batch.size();
    writing_ = false;
    done_.notify_all();
  }
  if (mine.error) std::rethrow_exception(mine.error);
  return mine.result;
}

std::size_t StepRecorder::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void StepRecorder::write(const std::vector<Pending*>& batch) {
  try {
    write_together(batch);
    return;
  } catch (const pqxx::sql_error&) {
    // The statement failed, so nothing of it was written: a row may be at fault.
    if (batch.size() == 1) {
      batch[0]->error = std::current_exception();
      return;
    }
  } catch (const Unavailable& e) {
    // A lock timeout or a deadlock names one row's instance, and nothing was written: the others
    // go on alone. A lost connection (the commit may have happened) reaches every writer.
    if (batch.size() == 1 || e.outcome_unknown()) {
      for (Pending* p : batch) p->error = std::current_exception();
      return;
    }
  } catch (...) {
    // The database is unreachable, or the commit's outcome unknown (a lost connection): every
    // writer learns it, as it would have writing alone; a retry could find its own row written.
    for (Pending* p : batch) p->error = std::current_exception();
    return;
  }
  // One row's failure must not become its neighbours': each on its own.
  for (Pending* p : batch) {
    try {
      write_together({p});
    } catch (...) {
      p->error = std::current_exception();
    }
  }
}

void StepRecorder::write_together(const std::vector<Pending*>& batch) {
  if (batch.size() == 1) {
    const StepRow& r = *batch[0]->row;
    const auto output = json_text(r.output);
    const auto error = json_text(r.error);
    const auto due = int_text(r.due_in_ms);
    pqxx::result written;
    {
      auto conn = pool_.acquire();
      pqxx::nontransaction tx(*conn);
      written = pg::exec(tx, sql::kRecordStep, r.instance_id, r.generation.value(), r.key,
                         std::string(to_string(r.kind)), r.config.dump(),
                         std::string(to_string(r.state)), r.attempts, pg::nullable(output),
                         pg::nullable(error), pg::nullable(due), r.what, r.detail.dump());
    }
    batch[0]->result.reset();
    if (!written.empty()) batch[0]->result = written[0][0].as<bool>();
    return;
  }
  json rows = json::array();
  for (std::size_t n = 0; n < batch.size(); ++n) {
    const StepRow& r = *batch[n]->row;
    rows.push_back({{"n", n},
                    {"instance_id", r.instance_id},
                    {"generation", r.generation.value()},
                    {"step_key", r.key},
                    {"kind", to_string(r.kind)},
                    {"config", r.config},
                    {"state", to_string(r.state)},
                    {"attempts", r.attempts},
                    {"output", r.output},
                    {"error", r.error},
                    {"due_ms", r.due_in_ms ? json(*r.due_in_ms) : json()},
                    {"what", r.what},
                    {"detail", r.detail}});
  }
  pqxx::result written;
  {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    written = pg::exec(tx, sql::kRecordSteps, rows.dump());
  }
  for (Pending* p : batch) p->result.reset();
  for (const auto& row : written) {
    batch.at(row[0].as<std::size_t>())->result = row[1].as<bool>();
  }
}

}  // namespace runledger::coordinator
