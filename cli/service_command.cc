// `runledger service`: the long-running process `up` supervises. It migrates on start, sweeps
// retention on a schedule and logs a status line; SIGTERM or SIGINT stops it cleanly. Later
// issues add the HTTP server, the coordinator and bots beside it.
#include <utility>  // before Boost.Asio: g++ 12 in C++20 mode needs it

#include <spdlog/spdlog.h>
#include <boost/asio.hpp>

#include <chrono>

#include "cli/cli.h"
#include "ledger/ledger.h"
#include "migrations/migrations.h"

namespace runledger::cli {
namespace {

using Clock = std::chrono::steady_clock;

void log_status(ledger::Ledger& ledger) {
  std::string line;
  for (const auto& count : ledger.count_by_status()) {
    line += std::string(ledger::to_string(count.status)) + "=" + std::to_string(count.runs) + " ";
  }
  spdlog::info("runs: {}", line.empty() ? "none" : line);
}

int service(const Arguments& args) {
  const std::chrono::seconds sweep_every(args.integer("--sweep-interval").value());
  const std::chrono::seconds status_every(args.integer("--status-interval").value());
  const std::string url = database_url();
  migrations::apply(url);  // logs what it applies

  pg::Pool pool(url, 2);
  ledger::Ledger ledger(pool);

  boost::asio::io_context io;
  boost::asio::signal_set stop(io, SIGINT, SIGTERM);
  stop.async_wait([&](const boost::system::error_code&, int sig) {
    spdlog::info("service: signal {}, stopping", sig);
    io.stop();
  });

  boost::asio::steady_timer sweep_timer(io), status_timer(io);
  std::function<void()> sweep = [&] {
    try {
      spdlog::info("retention sweep: deleted {} runs", ledger.sweep_retention());
    } catch (const std::exception& e) {
      spdlog::error("retention sweep failed: {}", e.what());
    }
    sweep_timer.expires_after(sweep_every);
    sweep_timer.async_wait([&](const boost::system::error_code& ec) {
      if (!ec) sweep();
    });
  };
  std::function<void()> status = [&] {
    try {
      log_status(ledger);
    } catch (const std::exception& e) {
      spdlog::error("status query failed: {}", e.what());
    }
    status_timer.expires_after(status_every);
    status_timer.async_wait([&](const boost::system::error_code& ec) {
      if (!ec) status();
    });
  };
  sweep();
  status();
  spdlog::info("service ready (retention sweep every {} s)", sweep_every.count());
  io.run();
  return 0;
}

}  // namespace

Command service_command() {
  return {
      .name = "service",
      .summary =
          "run the service against DATABASE_URL (`up` starts it): retention sweeps, a "
          "status log line; until SIGTERM or SIGINT",
      .description = "It migrates first, then sweeps at once and every --sweep-interval.",
      .options = {{.name = "--sweep-interval",
                   .value = "S",
                   .help = "seconds between retention sweeps",
                   .integer = kPositive,
                   .fallback = std::to_string(6 * 3600)},
                  {.name = "--status-interval",
                   .value = "S",
                   .help = "seconds between status log lines",
                   .integer = kPositive,
                   .fallback = "60"}},
      .run = service,
  };
}

}  // namespace runledger::cli
