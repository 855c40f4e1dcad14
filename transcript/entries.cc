// Transcript entries: append, head, streaming read, verification, and the system prompt.
#include <cstring>

#include "errors/errors.h"
#include "transcript/rows.h"
#include "transcript/statements.h"
#include "transcript/transcript.h"

namespace runledger::transcript {
namespace {

constexpr std::string_view kKindNames[] = {"system", "user", "assistant", "tool_result",
                                           "synthetic"};

// For reads of the run row: no row, no run.
void require_run(const pqxx::result& rows, const RunId& run) {
  if (rows.empty()) {
    throw NotFound("run " + run.value() + " does not exist", {{"run_id", run.value()}});
  }
}

}  // namespace

std::string_view to_string(EntryKind kind) {
  return kKindNames[static_cast<int>(kind)];
}

EntryKind parse_entry_kind(std::string_view name) {
  for (std::size_t i = 0; i < std::size(kKindNames); ++i) {
    if (kKindNames[i] == name) return static_cast<EntryKind>(i);
  }
  throw InvalidArgument("unknown transcript entry kind '" + std::string(name.substr(0, 32)) +
                        "' (system, user, assistant, tool_result, synthetic)");
}

digest::Sha256Digest chain(const digest::Sha256Digest& previous, std::int64_t seq, EntryKind kind,
                           std::string_view body) {
  char seq_be[8];
  for (int i = 0; i < 8; ++i) {
    seq_be[i] = static_cast<char>((static_cast<std::uint64_t>(seq) >> (56 - 8 * i)) & 0xff);
  }
  const std::string_view kind_name = to_string(kind);
  return digest::Sha256()
      .update(std::string_view(reinterpret_cast<const char*>(previous.data()), previous.size()))
      .update(std::string_view(seq_be, sizeof seq_be))
      .update(kind_name)
      .update(std::string_view("\0", 1))
      .update(body)
      .finish();
}

Store::Store(pg::Pool& pool, ledger::Ledger& ledger, Options options)
    : pool_(pool), ledger_(ledger), options_(options) {
  if (options_.read_page_entries < 1 || options_.read_slice_bytes < 1) {
    throw InvalidArgument("read_page_entries and read_slice_bytes must be positive");
  }
}

std::int64_t Store::append(const RunId& run, Generation generation, EntryKind kind,
                           std::string_view body) {
  return append_at(run, generation, kind, body, std::nullopt).seq;
}

Head Store::append_at(const RunId& run, Generation generation, EntryKind kind,
                      std::string_view body, std::optional<std::int64_t> expected_seq) {
  check_entry_size(body, options_.max_entry_bytes);
  if (expected_seq && *expected_seq < 1) {
    throw InvalidArgument("expected_seq must be at least 1", {{"field", "expected_seq"}});
  }
  {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    const auto rows =
        pg::exec(tx, sql::kAppend, run.value(), generation.value(), std::string(to_string(kind)),
                 bytes_param(body), SeqParam(expected_seq).get());
    if (!rows.empty()) return {rows[0][0].as<std::int64_t>(), digest_from(rows[0][1])};
  }
  if (expected_seq) {
    if (auto repeated = explain_refused_at(run, generation, kind, body, *expected_seq)) {
      return *repeated;
    }
  }
  ledger_.throw_refused(run, generation, "transcript append");
}

std::optional<Head> Store::explain_refused_at(const RunId& run, Generation generation,
                                              EntryKind kind, std::string_view body,
                                              std::int64_t expected_seq) {
  const ledger::Run current = still_owned(run, generation, "transcript append");
  const Head head = this->head(run);
  if (head.seq == expected_seq - 1) return std::nullopt;
  if (head.seq >= expected_seq) {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    const auto rows = pg::exec(tx, sql::kEntryIdentity, run.value(), expected_seq);
    if (!rows.empty()) {
      const auto& row = rows[0];
      const auto stored = digest_from(row["sha256"]);
      if (row["kind"].as<std::string>() == to_string(kind) &&
          row["generation"].as<std::int64_t>() == generation.value() &&
          chain(digest_from(row["previous"]), expected_seq, kind, body) == stored) {
        return Head{expected_seq, stored};
      }
    }
    throw Conflict("entry " + std::to_string(expected_seq) + " of run " + run.value() +
                       " is already another entry",
                   {{"run_id", run.value()},
                    {"expected_seq", expected_seq},
                    {"seq", head.seq},
                    {"generation", current.generation.value()}});
  }
  throw Conflict("the transcript of run " + run.value() + " ends at entry " +
                     std::to_string(head.seq) + ", not " + std::to_string(expected_seq - 1),
                 {{"run_id", run.value()}, {"expected_seq", expected_seq}, {"seq", head.seq}});
}

std::vector<std::pair<RunId, Store::RunRecord>> Store::run_records(const std::vector<RunId>& runs) {
  std::vector<std::pair<RunId, RunRecord>> out;
  if (runs.empty()) return out;
  const auto ids = pg::array_literal(runs, [](const RunId& r) { return r.value(); });
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  for (const auto& row : pg::exec(tx, sql::kRunRecords, ids)) {
    out.emplace_back(
        RunId(row["run_id"].as<std::string>()),
        RunRecord{{row["transcript_seq"].as<std::int64_t>(), digest_from(row["transcript_sha256"])},
                  row["steps"].as<std::int64_t>()});
  }
  return out;
}

std::vector<std::pair<RunId, std::int64_t>> Store::head_seqs(const std::vector<RunId>& runs) {
  std::vector<std::pair<RunId, std::int64_t>> out;
  if (runs.empty()) return out;
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto ids = pg::array_literal(runs, [](const RunId& r) { return r.value(); });
  for (const auto& row : pg::exec(tx, sql::kHeadSeqs, ids)) {
    out.emplace_back(RunId(row[0].as<std::string>()), row[1].as<std::int64_t>());
  }
  return out;
}

Head Store::head(const RunId& run) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kHead, run.value());
  require_run(rows, run);
  return {rows[0][0].as<std::int64_t>(), digest_from(rows[0][1])};
}

Summary Store::summary(const RunId& run) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kSummary, run.value());
  require_run(rows, run);
  return {
      rows[0]["entries"].as<std::int64_t>(),
      rows[0]["bytes"].as<std::int64_t>(),
      {rows[0]["transcript_seq"].as<std::int64_t>(), digest_from(rows[0]["transcript_sha256"])}};
}

std::string Store::system_prompt(const RunId& run) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kSystemPrompt, run.value());
  require_run(rows, run);
  return rows[0][0].is_null() ? std::string() : bytes_from(rows[0][0]);
}

void Store::read(const RunId& run, std::int64_t from_seq,
                 const std::function<void(const Entry&)>& fn) {
  read_while(run, from_seq, [&](const Entry& entry) {
    fn(entry);
    return true;
  });
}

void Store::read_while(const RunId& run, std::int64_t from_seq,
                       const std::function<bool(const Entry&)>& fn) {
  std::int64_t next = std::max<std::int64_t>(from_seq, 1);
  const auto slice = static_cast<std::int64_t>(options_.read_slice_bytes);
  for (;;) {
    std::vector<Entry> page;
    bool page_full = false;
    {
      // Borrowed per page and given back before `fn` runs, so `fn` may use the same pool.
      auto conn = pool_.acquire();
      pqxx::nontransaction tx(*conn);
      const auto rows =
          pg::exec(tx, sql::kReadPage, run.value(), next, slice, options_.read_page_entries);
      page_full = static_cast<int>(rows.size()) == options_.read_page_entries;
      for (const auto& row : rows) {
        page.push_back(Entry{row["seq"].as<std::int64_t>(),
                             Generation(row["generation"].as<std::int64_t>()),
                             parse_entry_kind(row["kind"].as<std::string>()),
                             row["body"].is_null() ? std::string() : bytes_from(row["body"]),
                             digest_from(row["sha256"]), row["created_at"].as<std::string>()});
        if (row["body"].is_null()) {
          // Too large to come inline: fetched slice by slice (each slice arrives hex-encoded),
          // and the page ends with it, so at most one large body is in memory at a time.
          const auto length = row["length"].as<std::int64_t>();
          page.back().body.reserve(static_cast<std::size_t>(length));
          for (std::int64_t offset = 0; offset < length; offset += slice) {
            const auto part =
                pg::exec(tx, sql::kReadSlice, run.value(), page.back().seq, offset + 1, slice);
            page.back().body += bytes_from(part[0][0]);
          }
          page_full = true;  // more may follow: the next page starts after this entry
          break;
        }
      }
    }
    for (auto& entry : page) {
      if (!fn(entry)) return;
      next = entry.seq + 1;
      std::string().swap(entry.body);  // release each body as soon as it has been handed out
    }
    if (!page_full) return;
  }
}

Verification Store::verify(const RunId& run) {
  const Head recorded = head(run);
  Verification v{true, 0, std::nullopt, ""};
  digest::Sha256Digest previous{};
  std::int64_t expected_seq = 1;
  const auto fail = [&](std::int64_t seq, std::string problem) {
    if (!v.ok) return;
    v.ok = false;
    v.first_bad_seq = seq;
    v.problem = std::move(problem);
  };
  read(run, 1, [&](const Entry& e) {
    ++v.entries;
    if (!v.ok) return;
    if (e.seq != expected_seq) {
      return fail(expected_seq, "entry " + std::to_string(expected_seq) + " is missing");
    }
    const auto computed = chain(previous, e.seq, e.kind, e.body);
    if (computed != e.sha256) {
      return fail(e.seq, "entry " + std::to_string(e.seq) + " does not match its hash");
    }
    previous = computed;
    ++expected_seq;
  });
  if (v.ok && expected_seq - 1 != recorded.seq) {
    fail(expected_seq, "the run's head is entry " + std::to_string(recorded.seq) +
                           " but entries end at " + std::to_string(expected_seq - 1));
  } else if (v.ok && previous != recorded.sha256) {
    fail(recorded.seq, "the run's head hash does not match the last entry");
  }
  return v;
}

}  // namespace runledger::transcript
