#include "tiergen/common/strict_json.h"

#include <type_traits>
#include <unordered_set>
#include <vector>

namespace tiergen {

namespace {

using json = nlohmann::json;

// nlohmann's DOM builder, with a set of the keys seen in each object being read. The
// parser calls these members on the static type, so hiding the base's is enough.
class RepeatedKeySax : public nlohmann::detail::json_sax_dom_parser<json> {
 public:
  explicit RepeatedKeySax(json& root) : json_sax_dom_parser(root, /*allow_exceptions_=*/true) {}

  bool start_object(std::size_t elements) {
    keys_.emplace_back();
    return json_sax_dom_parser::start_object(elements);
  }
  bool end_object() {
    if (!keys_.empty()) keys_.pop_back();
    return json_sax_dom_parser::end_object();
  }
  bool key(json::string_t& name) {
    if (!keys_.empty() && !keys_.back().insert(name).second && !repeated_) repeated_ = name;
    return json_sax_dom_parser::key(name);
  }

  // A number too large for a double is nlohmann's out_of_range.406, which escaped callers
  // that catch parse errors (the documented contract): thrown as a parse error at its
  // byte instead, as for any other invalid input.
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& last_token, const Exception& ex) {
    if constexpr (std::is_same_v<Exception, json::out_of_range>) {
      std::string what = ex.what();
      if (const auto p = what.find("] "); p != std::string::npos) what.erase(0, p + 2);
      throw json::parse_error::create(101, position, what, nullptr);
    }
    return json_sax_dom_parser::parse_error(position, last_token, ex);
  }

  std::optional<std::string> repeated() const { return repeated_; }

 private:
  std::vector<std::unordered_set<std::string>> keys_;
  std::optional<std::string> repeated_;
};

}  // namespace

StrictJson parse_json_noting_repeated_keys(const char* begin, const char* end) {
  StrictJson out;
  RepeatedKeySax sax(out.value);
  json::sax_parse(begin, end, &sax, nlohmann::detail::input_format_t::json, /*strict=*/true,
                  /*ignore_comments=*/false);
  out.repeated_key = sax.repeated();
  return out;
}

}  // namespace tiergen
