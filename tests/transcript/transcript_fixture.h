// A fresh database, a Ledger and a transcript Store, with one run claimed by bot-1.
#pragma once

#include <random>

#include "tests/ledger/ledger_fixture.h"
#include "transcript/transcript.h"

namespace runledger::testing {

struct TranscriptFixture : LedgerFixture {
  explicit TranscriptFixture(ledger::Options ledger_options = {}, transcript::Options options = {})
      : LedgerFixture(ledger_options), store(pool, ledger, options) {}

  // Dispatches and claims a run; returns its claim.
  ledger::Claim claimed_run(const std::string& key, std::optional<ledger::Budget> budget = {},
                            std::string system_prompt = "") {
    auto r = request(key);
    r.budget = budget;
    r.system_prompt = std::move(system_prompt);
    const RunId id = ledger.dispatch(r).run.run_id;
    return ledger.claim(owner, id);
  }

  transcript::Store store;
  ledger::Owner owner = make_owner("bot-1");
};

inline std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

inline transcript::StepIntent intent(std::int64_t step, const std::string& tool = "bash",
                                     nlohmann::json args = {{"cmd", "ls"}}) {
  return {StepNo(step), tool, "call-" + std::to_string(step), std::move(args)};
}

}  // namespace runledger::testing
