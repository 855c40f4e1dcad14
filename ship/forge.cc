// The local forge: branches of a bare repository, change requests as rows, real merge commits.
#include "errors/errors.h"
#include "ship/git.h"
#include "ship/ship.h"
#include "ship/statements.h"

namespace runledger::ship {
namespace {

ChangeState parse_state(const std::string& s) {
  if (s == "open") return ChangeState::open;
  if (s == "merged") return ChangeState::merged;
  return ChangeState::closed;
}

ChangeRequest change_from(const pqxx::row& row) {
  ChangeRequest c;
  c.id = row[0].as<std::int64_t>();
  c.repository = row[1].as<std::string>();
  c.branch = row[2].as<std::string>();
  c.title = row[3].as<std::string>();
  c.body = row[4].as<std::string>();
  c.state = parse_state(row[5].as<std::string>());
  if (!row[6].is_null()) c.merge_sha = row[6].as<std::string>();
  return c;
}

// A branch name git accepts and that cannot be taken for an option.
void check_branch(const std::string& branch) {
  if (branch.empty() || branch.size() > 200 || branch[0] == '-' ||
      branch.find_first_of(" ~^:?*[\\\n\t") != std::string::npos ||
      branch.find("..") != std::string::npos) {
    throw InvalidArgument("'" + branch.substr(0, 64) + "' is not a branch name",
                          {{"field", "branch"}});
  }
}

}  // namespace

std::string_view to_string(ChangeState state) {
  switch (state) {
    case ChangeState::open:
      return "open";
    case ChangeState::merged:
      return "merged";
    case ChangeState::closed:
      return "closed";
  }
  return "closed";
}

LocalForge::LocalForge(pg::Pool& pool, std::filesystem::path repository, std::string main_branch)
    : pool_(pool), repository_(std::move(repository)), main_branch_(std::move(main_branch)) {
  check_branch(main_branch_);
  if (run_git(repository_, {"rev-parse", "--is-bare-repository"}).second.rfind("true", 0) != 0) {
    throw InvalidArgument(repository_.string() + " is not a bare git repository");
  }
}

std::optional<std::string> LocalForge::branch_head(const std::string& branch) {
  check_branch(branch);
  const auto [code, output] =
      run_git(repository_, {"rev-parse", "--verify", "--quiet", "refs/heads/" + branch});
  if (code != 0) return std::nullopt;
  return output.substr(0, output.find('\n'));
}

Forge::Opened LocalForge::open_or_update(const std::string& branch, const std::string& title,
                                         const std::string& body) {
  if (!branch_head(branch)) {
    throw InvalidArgument("branch " + branch + " does not exist in " + repository_.string(),
                          {{"field", "branch"}});
  }
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kOpenOrUpdate, repository_.string(), branch, title, body);
  return {change_from(rows[0]), rows[0][7].as<bool>()};
}

std::optional<ChangeRequest> LocalForge::find_open(const std::string& branch) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kFindOpen, repository_.string(), branch);
  if (rows.empty()) return std::nullopt;
  return change_from(rows[0]);
}

ChangeRequest LocalForge::get(std::int64_t id) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kGetChange, id);
  if (rows.empty()) {
    throw NotFound("change request " + std::to_string(id) + " does not exist",
                   {{"change_request", id}});
  }
  return change_from(rows[0]);
}

ChangeRequest LocalForge::merge(std::int64_t id) {
  ChangeRequest change = get(id);
  if (change.state == ChangeState::merged) return change;
  if (change.state != ChangeState::open) {
    throw Conflict("change request " + std::to_string(id) + " is closed");
  }
  const auto head = branch_head(change.branch);
  if (!head) throw Conflict("the branch of change request " + std::to_string(id) + " is gone");
  std::string merged;
  // Compare-and-swap on main: another merge in between makes update-ref fail; then again.
  for (int attempt = 0; merged.empty(); ++attempt) {
    const std::string main =
        git_line(repository_, {"rev-parse", "--verify", "refs/heads/" + main_branch_});
    if (run_git(repository_, {"merge-base", "--is-ancestor", *head, main}).first == 0) {
      merged = main;  // already in main (an earlier merge whose record was lost)
      break;
    }
    const auto [code, tree_output] =
        run_git(repository_, {"merge-tree", "--write-tree", main, *head});
    if (code != 0) {
      throw Conflict("change request " + std::to_string(id) +
                     " does not merge cleanly: " + tree_output.substr(0, 2000));
    }
    const std::string tree = tree_output.substr(0, tree_output.find('\n'));
    const std::string commit = git_line(
        repository_,
        {"commit-tree", tree, "-p", main, "-p", *head, "-m",
         "Merge branch '" + change.branch + "' (change request " + std::to_string(id) + ")"});
    if (run_git(repository_, {"update-ref", "refs/heads/" + main_branch_, commit, main}).first ==
        0) {
      merged = commit;
    } else if (attempt >= 5) {
      throw Conflict("main moved under every merge attempt of change request " +
                     std::to_string(id));
    }
  }
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kRecordMerge, id, merged);
  if (rows.empty()) return get(id);  // recorded meanwhile by another merger
  return change_from(rows[0]);
}

void LocalForge::approve(std::int64_t id) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  if (pg::exec(tx, sql::kApprove, id).empty()) {
    const auto change = get(id);  // NotFound
    if (change.state != ChangeState::open) {
      throw Conflict("change request " + std::to_string(id) + " is " +
                     std::string(to_string(change.state)));
    }
  }
}

std::vector<ChangeRequest> LocalForge::approved_open(std::chrono::milliseconds delay) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  std::vector<ChangeRequest> out;
  for (const auto& row : pg::exec(tx, sql::kApprovedOpen, repository_.string(),
                                  static_cast<std::int64_t>(delay.count()))) {
    out.push_back(change_from(row));
  }
  return out;
}

}  // namespace runledger::ship
