#include <fstream>
#include <sstream>

#include "errors/errors.h"
#include "settlement/settlement.h"

namespace runledger::settlement {

std::string_view to_string(EffectClass c) {
  switch (c) {
    case EffectClass::pure:
      return "pure";
    case EffectClass::idempotent:
      return "idempotent";
    case EffectClass::unsafe:
      return "unsafe";
  }
  return "unsafe";
}

bool glob_match(std::string_view pattern, std::string_view text) {
  // Iterative matcher with one backtrack point: linear in practice, no recursion.
  std::size_t p = 0, t = 0, star = std::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

EffectClasses EffectClasses::parse(std::string_view text) {
  EffectClasses out;
  std::istringstream in{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    std::string head;
    if (!(words >> head)) continue;
    std::vector<std::string>* patterns = nullptr;
    if (head == "pure:") patterns = &out.pure_;
    if (head == "idempotent:") patterns = &out.idempotent_;
    if (patterns == nullptr) {
      throw InvalidArgument("effect classes, line " + std::to_string(number) +
                                ": expected 'pure:' or 'idempotent:' followed by tool patterns "
                                "(unlisted tools are unsafe)",
                            {{"line", number}});
    }
    for (std::string pattern; words >> pattern;) patterns->push_back(pattern);
  }
  return out;
}

EffectClasses EffectClasses::load(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw InvalidArgument("cannot read effect classes file " + file.string());
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str());
}

EffectClass EffectClasses::classify(std::string_view tool) const {
  for (const auto& p : pure_) {
    if (glob_match(p, tool)) return EffectClass::pure;
  }
  for (const auto& p : idempotent_) {
    if (glob_match(p, tool)) return EffectClass::idempotent;
  }
  return EffectClass::unsafe;
}

}  // namespace runledger::settlement
