// Invariant 5, "bytes are bytes": entries come back byte-for-byte, and the hash chain catches a
// changed entry and a deleted tail.
#include "errors/errors.h"
#include "tests/transcript/transcript_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using transcript::EntryKind;

namespace {

std::vector<transcript::Entry> read_all(transcript::Store& store, const RunId& run,
                                        std::int64_t from = 1) {
  std::vector<transcript::Entry> out;
  store.read(run, from, [&](const transcript::Entry& e) { out.push_back(e); });
  return out;
}

}  // namespace

TEST_CASE("entries round-trip byte-for-byte: NUL bytes, invalid UTF-8, 16 MiB, odd JSON") {
  TranscriptFixture f;
  const auto c = f.claimed_run("r");
  const RunId run = c.run.run_id;
  const Generation g = c.run.generation;
  const std::vector<std::string> bodies = {
      std::string("a\0b\0\0c", 6),
      "\xff\xfe\xc3\x28 invalid utf-8 \xed\xa0\x80",
      random_bytes(16u << 20, 7),
      "{ \"z\":1,   \"a\" : [ 1.0, 2e0 ],\n\t\"signature\":\"AbC==\" }  ",
      "",
  };
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    CHECK(f.store.append(run, g, i % 2 ? EntryKind::user : EntryKind::assistant, bodies[i]) ==
          static_cast<std::int64_t>(i + 1));
  }
  const auto entries = read_all(f.store, run);
  REQUIRE(entries.size() == bodies.size());
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    CHECK(entries[i].seq == static_cast<std::int64_t>(i + 1));
    CHECK(entries[i].body.size() == bodies[i].size());
    CHECK(entries[i].body == bodies[i]);
    CHECK(entries[i].generation == g);
  }
  CHECK(f.store.verify(run).ok);
}

TEST_CASE("reading streams from any seq across pages and slices") {
  transcript::Options small;
  small.read_page_entries = 3;
  small.read_slice_bytes = 1000;
  TranscriptFixture f({}, small);
  const auto c = f.claimed_run("r");
  std::vector<std::string> bodies;
  for (int i = 0; i < 10; ++i) {
    bodies.push_back(random_bytes(static_cast<std::size_t>(i) * 777, static_cast<unsigned>(i)));
    f.store.append(c.run.run_id, c.run.generation, EntryKind::tool_result, bodies.back());
  }
  const auto from_four = read_all(f.store, c.run.run_id, 4);
  REQUIRE(from_four.size() == 7);
  for (std::size_t i = 0; i < from_four.size(); ++i) {
    CHECK(from_four[i].seq == static_cast<std::int64_t>(i + 4));
    CHECK(from_four[i].body == bodies[i + 3]);
  }
  CHECK(read_all(f.store, c.run.run_id, 11).empty());
}

TEST_CASE("the chain is SHA-256 over previous hash, seq, kind and body, from 32 zero bytes") {
  TranscriptFixture f;
  const auto c = f.claimed_run("r");
  f.store.append(c.run.run_id, c.run.generation, EntryKind::system, "you are a bot");
  f.store.append(c.run.run_id, c.run.generation, EntryKind::user, "hi");
  const auto entries = read_all(f.store, c.run.run_id);
  const auto first = transcript::chain({}, 1, EntryKind::system, "you are a bot");
  CHECK(entries[0].sha256 == first);
  CHECK(entries[1].sha256 == transcript::chain(first, 2, EntryKind::user, "hi"));
  const auto head = f.store.head(c.run.run_id);
  CHECK(head.seq == 2);
  CHECK(head.sha256 == entries[1].sha256);
}

TEST_CASE("verify names the first entry whose bytes were changed") {
  TranscriptFixture f;
  const auto c = f.claimed_run("r");
  for (int i = 0; i < 5; ++i) {
    f.store.append(c.run.run_id, c.run.generation, EntryKind::assistant,
                   "turn " + std::to_string(i));
  }
  f.sql("UPDATE transcript_entries SET body = 'turn X' WHERE seq = 3");
  const auto v = f.store.verify(c.run.run_id);
  CHECK_FALSE(v.ok);
  CHECK(v.first_bad_seq == 3);
}

TEST_CASE("verify detects a deleted tail entry and a deleted middle entry") {
  TranscriptFixture f;
  const auto c = f.claimed_run("r");
  for (int i = 0; i < 5; ++i) {
    f.store.append(c.run.run_id, c.run.generation, EntryKind::assistant,
                   "turn " + std::to_string(i));
  }
  f.sql("DELETE FROM transcript_entries WHERE seq = 5");
  auto v = f.store.verify(c.run.run_id);
  CHECK_FALSE(v.ok);
  CHECK(v.first_bad_seq == 5);
  f.sql("DELETE FROM transcript_entries WHERE seq = 2");
  v = f.store.verify(c.run.run_id);
  CHECK_FALSE(v.ok);
  CHECK(v.first_bad_seq == 2);
}

TEST_CASE("every append is refused after a newer claim, and writes nothing") {
  ledger::Options o;
  o.lease_ttl = std::chrono::seconds(1);
  TranscriptFixture f(o);
  const auto old = f.claimed_run("r");
  f.store.append(old.run.run_id, old.run.generation, EntryKind::user, "before");
  f.db.advance_clock(std::chrono::seconds(2));
  const auto newer = f.ledger.claim(make_owner("bot-2"), old.run.run_id);
  CHECK_THROWS_AS(f.store.append(old.run.run_id, old.run.generation, EntryKind::assistant, "stale"),
                  FencedError);
  CHECK(f.store.head(old.run.run_id).seq == 1);
  CHECK(f.store.append(old.run.run_id, newer.run.generation, EntryKind::assistant, "fresh") == 2);
  const auto entries = read_all(f.store, old.run.run_id);
  CHECK(entries[1].generation == newer.run.generation);
}

TEST_CASE("an oversized entry or an unknown run is refused") {
  transcript::Options o;
  o.max_entry_bytes = 100;
  TranscriptFixture f({}, o);
  const auto c = f.claimed_run("r");
  CHECK_THROWS_AS(
      f.store.append(c.run.run_id, c.run.generation, EntryKind::user, std::string(101, 'x')),
      InvalidArgument);
  CHECK_THROWS_AS(f.store.append(RunId(random_uuid()), Generation(1), EntryKind::user, "x"),
                  NotFound);
  CHECK_THROWS_AS(transcript::parse_entry_kind("robot"), InvalidArgument);
}

TEST_CASE("the system prompt comes back as the exact bytes and never changes") {
  TranscriptFixture f;
  const std::string prompt = std::string("sys\0tem \xff prompt", 15);
  const auto c = f.claimed_run("r", std::nullopt, prompt);
  CHECK(f.store.system_prompt(c.run.run_id) == prompt);
  CHECK_THROWS(f.sql("UPDATE live_runs SET system_prompt = 'other' WHERE run_id = '" +
                     c.run.run_id.value() + "'"));
  CHECK(f.store.system_prompt(c.run.run_id) == prompt);
  const auto none = f.claimed_run("no-prompt");
  CHECK(f.store.system_prompt(none.run.run_id).empty());
}
