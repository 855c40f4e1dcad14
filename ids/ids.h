// Strong types for runledger's identifiers and tokens.
//
// Contract: a RunId cannot be passed where a Generation, a StepNo or an InstanceId is expected,
// and an IncarnationId holds only a canonical lowercase UUID. Values are validated where they enter
// (parse(); InvalidArgument otherwise); once constructed they are trusted.
//
// Thread-safety: immutable values.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace runledger {

template <class Tag, class T>
class StrongValue {
 public:
  constexpr explicit StrongValue(T value) : value_(std::move(value)) {}
  constexpr const T& value() const { return value_; }
  friend constexpr auto operator<=>(const StrongValue&, const StrongValue&) = default;
  friend std::ostream& operator<<(std::ostream& os, const StrongValue& v) { return os << v.value_; }

 private:
  T value_;
};

// True for a canonical 8-4-4-4-12 hexadecimal UUID (either case).
bool is_uuid(std::string_view text);

// A UUID that names something. parse() lower-cases and validates.
template <class Tag>
class UuidId : public StrongValue<Tag, std::string> {
 public:
  using StrongValue<Tag, std::string>::StrongValue;
  static UuidId parse(std::string_view text);
};

struct RunIdTag {};
struct IncarnationIdTag {};
struct GenerationTag {};
struct StepNoTag {};
struct SlotNameTag {};
struct InstanceIdTag {};

using RunId = UuidId<RunIdTag>;
// One start of one process: a fresh random UUID minted at boot.
using IncarnationId = UuidId<IncarnationIdTag>;
// The fencing token: bumped by every claim of a run.
using Generation = StrongValue<GenerationTag, std::int64_t>;
// A run's tool-call counter, continuous across generations.
using StepNo = StrongValue<StepNoTag, std::int64_t>;
// The stable name of a bot process, e.g. "bot-1".
using SlotName = StrongValue<SlotNameTag, std::string>;

// A workflow instance's id, chosen by whoever creates it: 1-255 characters of [A-Za-z0-9_.:-].
// parse() validates; the constructor trusts (ids read back from the database).
class InstanceId : public StrongValue<InstanceIdTag, std::string> {
 public:
  using StrongValue::StrongValue;
  static InstanceId parse(std::string_view text, std::string_view what = "instance_id");
};

// A fresh random (version 4) UUID from OpenSSL's CSPRNG.
std::string random_uuid();

// Throws InvalidArgument unless `text` is a canonical UUID; returns it lower-cased.
std::string canonical_uuid(std::string_view text, std::string_view what);

// Keys and names that reach the database (dispatch and thread keys, tool names, ...): 1-255 bytes
// of valid UTF-8 with no control characters. InvalidArgument naming `what` otherwise.
void check_key(std::string_view value, std::string_view what);
// Instance ids: 1-255 characters of [A-Za-z0-9_.:-].
void check_instance_id(std::string_view value, std::string_view what);

template <class Tag>
UuidId<Tag> UuidId<Tag>::parse(std::string_view text) {
  return UuidId(canonical_uuid(text, "id"));
}

}  // namespace runledger

template <class Tag, class T>
struct std::hash<runledger::StrongValue<Tag, T>> {
  std::size_t operator()(const runledger::StrongValue<Tag, T>& v) const {
    return std::hash<T>{}(v.value());
  }
};
template <>
struct std::hash<runledger::InstanceId> {
  std::size_t operator()(const runledger::InstanceId& v) const {
    return std::hash<std::string>{}(v.value());
  }
};
template <class Tag>
struct std::hash<runledger::UuidId<Tag>> {
  std::size_t operator()(const runledger::UuidId<Tag>& v) const {
    return std::hash<std::string>{}(v.value());
  }
};
