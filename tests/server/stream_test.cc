// Following a run: the transcript's tail as Server-Sent Events, and waiting for a run's end.
#include <catch2/catch.hpp>

#include <future>
#include <thread>

#include "tests/server/server_fixture.h"

using namespace runledger;
using namespace std::chrono_literals;
using runledger::testing::base64;
using runledger::testing::EventReader;
using runledger::testing::Held;
using runledger::testing::HttpClient;
using runledger::testing::ServerFixture;

namespace {

void append(HttpClient& c, const Held& h, const std::string& kind, const std::string& body) {
  const auto answer =
      c.post(h.path() + "/transcript",
             {{"generation", h.generation}, {"kind", kind}, {"body_base64", base64(body)}});
  REQUIRE(answer.status == 200);
}

void finish(HttpClient& c, const Held& h) {
  const auto answer =
      c.post(h.path() + "/finish",
             {{"generation", h.generation}, {"status", "finished"}, {"result", {{"ok", true}}}});
  REQUIRE(answer.status == 200);
}

// The next event, which must come within 5 s.
testing::ServerEvent next_event(EventReader& reader) {
  auto event = reader.next(5s);
  REQUIRE(event.has_value());
  return *event;
}

void check_entry(const testing::ServerEvent& e, std::int64_t seq, const std::string& kind,
                 const std::string& body) {
  CHECK(e.id == std::to_string(seq));
  CHECK(e.event == kind);
  const auto entry = e.json();
  CHECK(entry["seq"] == seq);
  CHECK(entry["kind"] == kind);
  CHECK(entry["body_base64"] == base64(body));
  CHECK(entry["sha256"].get<std::string>().size() == 64);
}

server::Options options_with(std::chrono::milliseconds keepalive) {
  auto o = ServerFixture::fast_options();
  o.tail_poll = 50ms;
  o.stream_keepalive = keepalive;
  return o;
}

}  // namespace

TEST_CASE("a transcript tail sends the entries in order, then each new one, then the run's end") {
  ServerFixture f(options_with(60s));
  auto c = f.client();
  const Held h = f.dispatch_and_claim(c);
  append(c, h, "user", "one");
  append(c, h, "assistant", "two");
  EventReader tail(f.http->port(), h.path() + "/transcript", f.bot_token);
  REQUIRE(tail.status() == 200);
  CHECK(tail.headers().at("Content-Type") == "text/event-stream");
  CHECK(tail.headers().at("Cache-Control") == "no-store");
  check_entry(next_event(tail), 1, "user", "one");
  check_entry(next_event(tail), 2, "assistant", "two");
  CHECK_FALSE(tail.next(200ms).has_value());  // nothing more yet, and the stream stays open
  CHECK_FALSE(tail.ended());

  append(c, h, "tool_result", "three");
  check_entry(next_event(tail), 3, "tool_result", "three");
  finish(c, h);
  const auto end = next_event(tail);
  CHECK(end.event == "end");
  CHECK(end.json() == nlohmann::json{{"run_id", h.run}, {"status", "finished"}});
  CHECK_FALSE(tail.next(5s).has_value());
  CHECK(tail.ended());
}

TEST_CASE("a tail reconnecting with Last-Event-ID misses and repeats nothing") {
  ServerFixture f(options_with(60s));
  auto c = f.client();
  const Held h = f.dispatch_and_claim(c);
  for (const char* body : {"a", "b", "c"}) append(c, h, "user", body);
  {
    EventReader first(f.http->port(), h.path() + "/transcript", f.bot_token);
    check_entry(next_event(first), 1, "user", "a");
    check_entry(next_event(first), 2, "user", "b");
  }  // gone mid-stream, with entry 3 maybe sent and not read
  append(c, h, "user", "d");
  EventReader again(f.http->port(), h.path() + "/transcript", f.bot_token, "2");
  check_entry(next_event(again), 3, "user", "c");
  check_entry(next_event(again), 4, "user", "d");
  append(c, h, "user", "e");
  check_entry(next_event(again), 5, "user", "e");

  // `from` starts a fresh reader anywhere; Last-Event-ID wins over it.
  EventReader from(f.http->port(), h.path() + "/transcript?from=4", f.bot_token);
  check_entry(next_event(from), 4, "user", "d");
  EventReader both(f.http->port(), h.path() + "/transcript?from=1", f.bot_token, "4");
  check_entry(next_event(both), 5, "user", "e");
}

TEST_CASE("a tail refuses what it cannot follow before it begins: one envelope each") {
  ServerFixture f(options_with(60s));
  auto c = f.client();
  const Held h = f.dispatch_and_claim(c);
  EventReader unknown(f.http->port(), "/v1/runs/" + random_uuid() + "/transcript", f.bot_token);
  CHECK(unknown.status() == 404);
  CHECK(nlohmann::json::parse(unknown.body())["code"] == "not_found");
  EventReader bad_id(f.http->port(), h.path() + "/transcript", f.bot_token, "two");
  CHECK(bad_id.status() == 422);
  CHECK(nlohmann::json::parse(bad_id.body())["details"]["field"] == "Last-Event-ID");
  EventReader limit(f.http->port(), h.path() + "/transcript?limit=5", f.bot_token);
  CHECK(limit.status() == 422);
  // A token travels in the header alone: there is no query parameter for one.
  EventReader in_url(f.http->port(), h.path() + "/transcript?access_token=" + f.bot_token, "");
  CHECK(in_url.status() == 401);
  CHECK(in_url.body().find(f.bot_token) == std::string::npos);
}

TEST_CASE("a slow reader of a tail holds no database connection while others are served") {
  ServerFixture f(options_with(60s), 2s);
  auto c = f.client();
  const Held h = f.dispatch_and_claim(c);
  const std::string mib(1u << 20, 'x');
  constexpr int kEntries = 24;  // far more than the socket buffers hold
  for (int i = 0; i < kEntries; ++i) append(c, h, "user", mib);
  finish(c, h);
  EventReader slow(f.http->port(), h.path() + "/transcript", f.bot_token);
  REQUIRE(slow.status() == 200);
  std::this_thread::sleep_for(500ms);  // the server fills the socket, then waits on the reader
  {
    // Every connection of the server's pool can be had: the stream holds none.
    std::vector<pg::Pool::Lease> all;
    for (int i = 0; i < f.pool.size(); ++i) all.push_back(f.pool.acquire());
  }
  CHECK(c.get(h.path()).status == 200);
  for (int seq = 1; seq <= kEntries; ++seq) {
    const auto event = next_event(slow);
    CHECK(event.id == std::to_string(seq));
  }
  CHECK(next_event(slow).event == "end");
}

TEST_CASE("a tail whose reader went away is let go at once, not at its next keep-alive") {
  auto o = options_with(60s);
  o.max_connections = 2;
  ServerFixture f(o);
  auto c = f.client();  // one connection, kept alive
  const Held h = f.dispatch_and_claim(c);
  {
    EventReader gone(f.http->port(), h.path() + "/transcript", f.bot_token);
    REQUIRE(gone.status() == 200);
    CHECK_FALSE(gone.next(300ms).has_value());  // it waits on the run watch
  }
  // The second connection is free again well before the 60 s keep-alive would have found out.
  const auto until = std::chrono::steady_clock::now() + 5s;
  unsigned status = 0;
  while (std::chrono::steady_clock::now() < until) {
    HttpClient other(f.http->port(), f.bot_token);
    if ((status = other.get("/healthz").status) == 200) break;
    std::this_thread::sleep_for(50ms);
  }
  CHECK(status == 200);
}

TEST_CASE("an idle tail sends keep-alive comments") {
  ServerFixture f(options_with(100ms));
  auto c = f.client();
  const Held h = f.dispatch_and_claim(c);
  EventReader tail(f.http->port(), h.path() + "/transcript", f.bot_token);
  CHECK_FALSE(tail.next(700ms).has_value());
  CHECK(tail.comments() >= 3);
  append(c, h, "user", "after the comments");
  check_entry(next_event(tail), 1, "user", "after the comments");
}

TEST_CASE("stopping the server ends its tails without their end event, and promptly") {
  auto o = options_with(60s);
  o.grace = 10s;
  ServerFixture f(o);
  auto c = f.client();
  const Held h = f.dispatch_and_claim(c);
  append(c, h, "user", "one");
  EventReader tail(f.http->port(), h.path() + "/transcript", f.bot_token);
  check_entry(next_event(tail), 1, "user", "one");
  const auto t0 = std::chrono::steady_clock::now();
  f.http->stop();
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);  // not the 10 s grace
  CHECK_FALSE(tail.next(2s).has_value());
  CHECK(tail.ended());
}

TEST_CASE("GET /v1/runs/{id}?wait_ms answers at the run's end, or at the deadline as it stands") {
  ServerFixture f(options_with(60s));
  auto c = f.client();
  const Held h = f.dispatch_and_claim(c);

  const auto t0 = std::chrono::steady_clock::now();
  const auto running = c.get(h.path() + "?wait_ms=300");
  CHECK(running.status == 200);
  CHECK(running.json()["status"] == "running");
  CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);

  auto waiting = std::async(std::launch::async, [&] {
    HttpClient mine(f.http->port(), f.bot_token);
    return mine.get(h.path() + "?wait_ms=20000");
  });
  CHECK(waiting.wait_for(300ms) == std::future_status::timeout);
  const auto finished_at = std::chrono::steady_clock::now();
  finish(c, h);
  const auto answer = waiting.get();
  CHECK(std::chrono::steady_clock::now() - finished_at < 2s);
  CHECK(answer.status == 200);
  CHECK(answer.json()["status"] == "finished");
  CHECK(answer.json()["result"] == nlohmann::json{{"ok", true}});

  CHECK(c.get(h.path() + "?wait_ms=5000").json()["status"] == "finished");  // at once
  const auto too_long = c.get(h.path() + "?wait_ms=30001");
  CHECK(too_long.status == 422);
  CHECK(too_long.json()["details"]["field"] == "wait_ms");
}
