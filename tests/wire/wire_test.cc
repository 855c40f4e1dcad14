// Untrusted input without a server: what parse_json refuses and how (Malformed for what is not
// JSON, InvalidArgument naming where for JSON the service will not take), what the body reader
// names in its refusals, and strict base64.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "errors/errors.h"
#include "wire/wire.h"

using namespace runledger;
using nlohmann::json;

namespace {

std::string nested_arrays(std::size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

std::string nested_objects(std::size_t depth) {
  std::string text;
  for (std::size_t i = 0; i < depth; ++i) text += "{\"a\":";
  text += "1";
  return text + std::string(depth, '}');
}

// The field an InvalidArgument from `read` names; fails the test if it throws nothing else.
template <class Read>
std::string refused_field(Read read) {
  try {
    read();
  } catch (const InvalidArgument& e) {
    return e.details().at("field").get<std::string>();
  }
  FAIL("no InvalidArgument");
  return {};
}

std::string refused_field_of(std::string_view text) {
  return refused_field([&] { wire::parse_json(text); });
}

}  // namespace

TEST_CASE("parse_json accepts a nesting of max_depth and refuses one deeper, while parsing") {
  CHECK(wire::parse_json(nested_arrays(64)).is_array());
  CHECK(wire::parse_json(nested_objects(64)).is_object());
  for (const std::string& deep : {nested_arrays(65), nested_objects(65)}) {
    try {
      wire::parse_json(deep);
      FAIL("accepted depth 65");
    } catch (const Malformed& e) {
      CHECK(e.details() == json{{"max_depth", 64}});
    }
  }
  wire::Limits shallow;
  shallow.max_depth = 1;
  CHECK(wire::parse_json("[1, 2]", shallow).size() == 2);
  CHECK_THROWS_AS(wire::parse_json("[[]]", shallow), Malformed);
  shallow.max_depth = 0;
  CHECK(wire::parse_json("7", shallow) == 7);
  CHECK_THROWS_AS(wire::parse_json("[]", shallow), Malformed);
}

TEST_CASE("a 100000-deep document is refused without building it") {
  CHECK_THROWS_AS(wire::parse_json(nested_arrays(100'000)), Malformed);
  CHECK_THROWS_AS(wire::parse_json(nested_objects(100'000)), Malformed);
  CHECK_THROWS_AS(wire::parse_json(std::string(100'000, '[')), Malformed);
}

TEST_CASE("what is not JSON is Malformed with the byte offset, and the payload is not echoed") {
  const auto offset_of = [](std::string_view text) -> std::int64_t {
    try {
      wire::parse_json(text);
    } catch (const Malformed& e) {
      CHECK(std::string(e.what()).find("secret") == std::string::npos);
      return e.details().value("offset", std::int64_t{-1});
    }
    FAIL("accepted");
    return -2;
  };
  CHECK(offset_of(R"({"a": 1} secret)") == 9);      // trailing garbage
  CHECK(offset_of(R"({"a": 1}{"b": 2})") == 8);     // a second document
  CHECK(offset_of(R"({"a": secret})") == 6);        // an invalid literal
  CHECK(offset_of(R"({"a": "secret)") == 13);       // an unterminated string
  CHECK(offset_of(R"(["secret",])") == 10);         // a trailing comma
  CHECK(offset_of("{\"a\": \"secr\xff\"}") == 11);  // invalid UTF-8 in a string
  CHECK(offset_of("\xff") == 0);                    // invalid UTF-8 outside one
  CHECK(offset_of("[\"\xc0\x80secret\"]") == 2);    // an overlong encoding of U+0000
  CHECK(offset_of(R"(["secret\ud800"])") == 14);    // a high surrogate with no low one
  CHECK(offset_of(R"(["\udc00secret"])") == 7);     // a lone low surrogate
  CHECK(offset_of("[\"se\ncret\"]") == 4);          // a raw control character
  CHECK(offset_of(" \n\t ") == 4);                  // whitespace alone
  CHECK_THROWS_AS(wire::parse_json(""), Malformed);
  CHECK(wire::parse_json(R"(" \ud83d\ude00 ")") == " \xf0\x9f\x98\x80 ");  // a valid pair
}

TEST_CASE("a syntax error anywhere wins over what parse_json would refuse as InvalidArgument") {
  CHECK_THROWS_AS(wire::parse_json(R"({"a": "\u0000", "a": 1)"), Malformed);
}

TEST_CASE("a key given twice in one object is refused, not last-wins") {
  CHECK(refused_field_of(R"({"a": 1, "b": {"c": 1, "c": 2}})") == "/b/c");
  CHECK(refused_field_of(R"({"a/b~": 1, "a/b~": 1})") == "/a~1b~0");
  CHECK(wire::parse_json(R"({"a": {"c": 1}, "b": {"c": 2}})").size() == 2);
}

TEST_CASE("U+0000 in a string value or in a key is refused, naming where") {
  CHECK(refused_field_of(R"({"intents": [{"args": {"x": "a\u0000b"}}]})") == "/intents/0/args/x");
  CHECK(refused_field_of(R"(["ok", ["ok", "\u0000"]])") == "/1/1");
  CHECK(refused_field_of(R"("\u0000")") == "");
  // A key is named by its object: the key itself is the offender.
  CHECK(refused_field_of(R"({"o": {"k\u0000": 1}})") == "/o");
  try {
    wire::parse_json(R"({"a": "\u0000"})");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()).find("U+0000") != std::string::npos);
  }
}

TEST_CASE("integers must fit int64; every integer comes back as an int64") {
  const json max = wire::parse_json("[9223372036854775807, -9223372036854775808]");
  CHECK(max[0].get<std::int64_t>() == INT64_MAX);
  CHECK(max[1].get<std::int64_t>() == INT64_MIN);
  CHECK_FALSE(max[0].is_number_unsigned());
  CHECK_FALSE(wire::parse_json("5").is_number_unsigned());
  CHECK(refused_field_of("[9223372036854775808]") == "/0");
  CHECK(refused_field_of("[18446744073709551615]") == "/0");
  CHECK(refused_field_of(R"({"n": -9223372036854775809})") == "/n");
  CHECK(refused_field_of(R"({"n": 123456789012345678901234567890})") == "/n");
}

TEST_CASE("floats are finite doubles; one beyond a double is refused") {
  CHECK(wire::parse_json("[1.5, -2e-3, 1e300, 1E2]")[3] == 100.0);
  CHECK(wire::parse_json("1e-400") == 0.0);  // underflow is a double
  CHECK(refused_field_of(R"({"x": [1e400]})") == "/x/0");
  CHECK(refused_field_of(R"({"x": -1e400})") == "/x");
  CHECK_THROWS_AS(wire::parse_json("NaN"), Malformed);
  CHECK_THROWS_AS(wire::parse_json("Infinity"), Malformed);
}

TEST_CASE("a key over max_key_bytes and a string over max_string_bytes are refused") {
  const std::string key255(255, 'k');
  CHECK(wire::parse_json("{\"" + key255 + "\": 1}").contains(key255));
  CHECK(refused_field_of("{\"o\": {\"" + key255 + "k\": 1}}") == "/o");
  wire::Limits limits;
  limits.max_string_bytes = 3;
  CHECK(wire::parse_json(R"(["abc"])", limits)[0] == "abc");
  CHECK(refused_field([&] { wire::parse_json(R"(["abc", "abcd"])", limits); }) == "/1");
}

TEST_CASE("Object refuses a body that is not an object, naming the body") {
  const json array = json::array();
  CHECK(refused_field([&] { wire::Object body(array); }) == "");
}

// Every reader of a field, in its required and its optional form, and the fields of kFields that
// it refuses for their type.
struct Reader {
  void (*required)(wire::Object&, const char* key);
  void (*optional)(wire::Object&, const char* key);
  std::vector<const char*> wrong_types;
};

constexpr std::string_view kFields = R"({
  "s": "a text", "n": 5, "b": true, "id": "0B3A7C38-1E5F-4C1B-9C7D-2A9E8F6B5D41",
  "bytes": "aGk=", "o": {"n": 7}, "a": [1, {"n": 1}], "nothing": null, "f": 1.5})";

// A reader and its optional_ form, and the fields it refuses for their type.
// clang-format off
#define READER(name, ...)                                                    \
  Reader{[](wire::Object& o, const char* k) { o.name(k); },                  \
         [](wire::Object& o, const char* k) { o.optional_##name(k); }, {__VA_ARGS__}}
const Reader kReaders[] = {
    READER(string, "n", "o"),
    READER(int64, "s", "f", "b"),  // a float is no integer
    READER(boolean, "n", "s"),
    READER(uuid, "s", "n"),
    READER(base64, "s", "n"),
    READER(object, "a", "s"),
    READER(array, "o", "s"),
    READER(any),
};
#undef READER
// clang-format on

TEST_CASE("each reader reads its type") {
  const json j = wire::parse_json(kFields);
  wire::Object body(j);
  CHECK(body.string("s") == "a text");
  CHECK(body.int64("n", 1, 5) == 5);
  CHECK(body.boolean("b"));
  CHECK(body.uuid("id") == "0b3a7c38-1e5f-4c1b-9c7d-2a9e8f6b5d41");
  CHECK(body.base64("bytes") == "hi");
  CHECK(body.object("o").int64("n") == 7);
  CHECK(body.array("a").size() == 2);
  CHECK(body.any("o") == json{{"n", 7}});
  CHECK(body.optional_int64("n", 1, 5) == 5);
  CHECK(body.optional_string("s") == "a text");
  CHECK(body.optional_boolean("b") == true);
  CHECK(body.optional_uuid("id") == "0b3a7c38-1e5f-4c1b-9c7d-2a9e8f6b5d41");
  CHECK(body.optional_base64("bytes") == "hi");
  CHECK(body.optional_object("o")->name() == "o");
  CHECK(body.optional_array("a")->size() == 2);
  CHECK(body.optional_any("f") == 1.5);
}

TEST_CASE("a required reader refuses an absent or null field; an optional one reads nothing") {
  const json j = wire::parse_json(kFields);
  wire::Object body(j);
  for (const Reader& reader : kReaders) {
    for (const char* key : {"missing", "nothing"}) {
      CHECK(refused_field([&] { reader.required(body, key); }) == key);
      CHECK_NOTHROW(reader.optional(body, key));
    }
  }
  CHECK_FALSE(body.optional_string("missing"));
  CHECK_FALSE(body.optional_int64("nothing"));
  CHECK_FALSE(body.optional_object("nothing"));
  CHECK_FALSE(body.optional_any("nothing"));
}

TEST_CASE("each reader, required or optional, refuses a field of the wrong type, naming it") {
  const json j = wire::parse_json(kFields);
  wire::Object body(j);
  for (const Reader& reader : kReaders) {
    for (const char* key : reader.wrong_types) {
      INFO(key);
      CHECK(refused_field([&] { reader.required(body, key); }) == key);
      CHECK(refused_field([&] { reader.optional(body, key); }) == key);
    }
  }
}

TEST_CASE("an integer out of its bounds is refused, naming the field") {
  const json j = wire::parse_json(kFields);
  wire::Object body(j);
  CHECK(body.int64("n", 5, 5) == 5);
  CHECK(refused_field([&] { body.int64("n", 6, 10); }) == "n");
  CHECK(refused_field([&] { body.int64("n", 1, 4); }) == "n");
  CHECK(refused_field([&] { body.optional_int64("n", 6); }) == "n");
}

TEST_CASE("nested fields are named by their path: dotted, with [i] for array elements") {
  const json j = wire::parse_json(kFields);
  wire::Object body(j);
  CHECK(refused_field([&] { body.object("o").string("n"); }) == "o.n");
  CHECK(refused_field([&] { body.object("o").string("absent"); }) == "o.absent");
  const auto elements = body.array("a");
  CHECK(elements[0].name() == "a[0]");
  CHECK(refused_field([&] { elements[0].string(); }) == "a[0]");
  CHECK(refused_field([&] { elements[1].object().int64("n", 2); }) == "a[1].n");
  CHECK(refused_field([&] { elements[1].object().object("deeper"); }) == "a[1].deeper");
  CHECK(body.object("o").name_of("n") == "o.n");
}

TEST_CASE("a refusal names the field and what was expected, never the value") {
  const json j = wire::parse_json(R"({"budget": {"wall_s": "secret"}})");
  wire::Object body(j);
  try {
    body.object("budget").int64("wall_s", 1, 86400);
    FAIL("accepted");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()) == "budget.wall_s: expected an integer from 1 to 86400");
  }
  CHECK_THROWS_WITH(body.object("budget").string("max_steps"), "budget.max_steps is required");
}

TEST_CASE("finish refuses the first field no reader asked for, in nested objects too") {
  const json j = wire::parse_json(
      R"({"dispatch_key": "k", "budget": {"wall_s": 5, "max_stesp": 3},
          "intents": [{"step_no": 1}, {"step_no": 2, "extra": 1}]})");
  {
    wire::Object body(j);
    body.string("dispatch_key");
    CHECK(refused_field([&] { body.finish(); }) == "budget");
  }
  {
    wire::Object body(j);
    body.string("dispatch_key");
    body.object("budget").int64("wall_s");
    body.optional_int64("never_given");
    for (const wire::Value& intent : body.array("intents")) intent.object().int64("step_no");
    CHECK(refused_field([&] { body.finish(); }) == "budget.max_stesp");
    body.object("budget").int64("max_stesp");  // the same object, read again: one record
    CHECK(refused_field([&] { body.finish(); }) == "intents[1].extra");
  }
  {
    // A field read with any() is not descended into: what it holds is the route's.
    wire::Object body(j);
    body.string("dispatch_key");
    body.any("budget");
    body.any("intents");
    CHECK_NOTHROW(body.finish());
  }
}

TEST_CASE("refuse names the field for a route's own checks") {
  CHECK(refused_field([] { wire::refuse("system_prompt", "either this or the other"); }) ==
        "system_prompt");
  const json j = json::object();
  CHECK(wire::Object(j).name_of("x") == "x");
}

TEST_CASE("base64 decodes standard padded text and refuses anything else, naming the field") {
  CHECK(wire::base64_decode("", "f").empty());
  CHECK(wire::base64_decode("Zg==", "f") == "f");
  CHECK(wire::base64_decode("Zm8=", "f") == "fo");
  CHECK(wire::base64_decode("Zm9v", "f") == "foo");
  CHECK(wire::base64_decode("Zm9vYmFy", "f") == "foobar");
  CHECK(wire::base64_decode("+/+/", "f") == "\xfb\xff\xbf");
  CHECK(wire::base64_decode("AA==", "f") == std::string(1, '\0'));
  for (const char* bad : {"Zg", "Zg=", "Zm8", "Zg===", "====", "Z===", "Zg=x", "Zg==Zg==", "Zm 9v",
                          "Zm9v\n", " Zm9v", "Zm9-", "Zm9_", "Zh==", "Zm9="}) {
    INFO(bad);
    CHECK(refused_field([&] { wire::base64_decode(bad, "body_base64"); }) == "body_base64");
  }
  CHECK(refused_field([&] { wire::base64_decode(std::string("Zm\0v", 4), "f"); }) == "f");
}

TEST_CASE("base64 encodes every byte string so that it decodes back") {
  CHECK(wire::base64_encode("") == "");
  CHECK(wire::base64_encode("f") == "Zg==");
  CHECK(wire::base64_encode("foobar") == "Zm9vYmFy");
  std::string bytes;
  for (int i = 0; i < 1000; ++i) {
    bytes.push_back(static_cast<char>(i * 7));
    CHECK(wire::base64_decode(wire::base64_encode(bytes), "f") == bytes);
  }
}
