#include "src/io/jinja/builtins.h"

#include "src/io/jinja/python_text.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <ctime>
#include <set>

#include <fmt/format.h>

namespace tiergen::io::jinja {

namespace {

// str.strip / lstrip / rstrip with `chars` as the template gave it (none: whitespace).
std::string strip_chars(const std::string& s, const Value* chars, bool left, bool right) {
  if (chars == nullptr || chars->is_none() || chars->is_undefined()) return strip_text(s, nullptr, left, right);
  const std::string set = chars->str();
  return strip_text(s, &set, left, right);
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out += s.substr(pos, hit - pos) + to;
    check_text_size(out.size(), "replace()");
    pos = hit + from.size();
  }
  return out + s.substr(pos);
}

// str.split(sep=None, maxsplit=-1).
List split(const std::string& s, const Value* sep, int64_t maxsplit) {
  List out;
  auto push = [&out](std::string part) {
    TG_CHECK(out.size() < kMaxItems, "split() into more than {} parts", kMaxItems);
    out.push_back(Value::string(std::move(part)));
  };
  if (sep == nullptr || sep->is_none()) {
    const auto space_at = [&](size_t i) { return is_python_space(decode_code_point(s, i)); };
    size_t i = 0;
    for (;;) {
      while (i < s.size() && space_at(i)) i += code_point_bytes(s, i);
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        push(strip_text(std::string_view(s).substr(i), nullptr, false, true));
        break;
      }
      const size_t start = i;
      while (i < s.size() && !space_at(i)) i += code_point_bytes(s, i);
      push(s.substr(start, i - start));
    }
    return out;
  }
  const std::string delimiter = sep->str();
  TG_CHECK(!delimiter.empty(), "split: empty separator");
  size_t pos = 0;
  for (;;) {
    const size_t hit = s.find(delimiter, pos);
    if (hit == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) break;
    push(s.substr(pos, hit - pos));
    pos = hit + delimiter.size();
  }
  push(s.substr(pos));
  return out;
}

// ---- Argument helpers.
int64_t int_arg(const CallArgs& args, const char* name, size_t index, int64_t fallback) {
  const Value* v = args.get(name, index);
  if (v == nullptr || v->is_none()) return fallback;
  TG_CHECK(v->kind() == Value::Kind::Int || v->kind() == Value::Kind::Bool, "'{}' must be an integer, not a {}", name,
           v->type_name());
  return v->as_int();
}
bool bool_arg(const CallArgs& args, const char* name, size_t index, bool fallback) {
  const Value* v = args.get(name, index);
  return v == nullptr ? fallback : v->truthy();
}
std::string string_arg(const CallArgs& args, const char* name, size_t index, const std::string& fallback) {
  const Value* v = args.get(name, index);
  return v == nullptr || v->is_undefined() ? fallback : v->str();
}

// An undefined value used where a value is needed.
[[noreturn]] void undefined_error(const Value& v) { TG_THROW("'{}' is undefined", v.name()); }

std::string text_of(const Value& v, const char* filter) {
  if (v.is_undefined() || v.is_string()) return v.str();
  if (v.kind() == Value::Kind::Function) TG_THROW("{}: a function is not text", filter);
  return v.str();
}

// `attribute` of selectattr/map/sort: "a.b" or an index, looked up in each item.
Value attribute_path(const Value& item, const std::string& path) {
  Value current = item;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (current.is_dict()) {
      const Value* found = current.find(part);
      current = found ? *found : Value::undefined(part);
    } else if (current.is_list() && !part.empty() && part.size() <= 9 && std::all_of(part.begin(), part.end(), ::isdigit)) {
      const size_t i = std::stoul(part);
      current = i < current.items().size() ? current.items()[i] : Value::undefined(part);
    } else {
      current = Value::undefined(part);
    }
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

// Sort key comparison; strings compare case-insensitively unless asked otherwise.
bool sort_less(const Value& a, const Value& b, bool case_sensitive) {
  if (!case_sensitive && a.is_string() && b.is_string()) return lower_text(a.as_string()) < lower_text(b.as_string());
  return less(a, b);
}

// A double as a 64-bit integer (truncated, as Python's int()); past the range an error,
// not a wrapped or undefined value.
int64_t to_integer(double d, const char* what) {
  TG_CHECK(std::isfinite(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0,
           "{}: {} is past the 64-bit integers templates compute with", what, d);
  return static_cast<int64_t>(d);
}

// ---- Filters, one function each where they take more than a line.
Value filter_join(const Value& value, const CallArgs& args) {
  const std::string separator = string_arg(args, "d", 0, "");
  const Value* attribute = args.get("attribute", 1);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(value)) {
    if (!first) out += separator;
    first = false;
    out += (attribute ? attribute_path(item, attribute->str()) : item).str();
    check_text_size(out.size(), "join");
  }
  return Value::string(out);
}

Value filter_default(const Value& value, const CallArgs& args) {
  const bool boolean = bool_arg(args, "boolean", 1, false);
  if (value.is_undefined() || (boolean && !value.truthy())) {
    const Value* fallback = args.get("default_value", 0);
    return fallback ? *fallback : Value::string("");
  }
  return value;
}

// select / reject / selectattr / rejectattr.
Value filter_select(const Value& value, const CallArgs& args, bool by_attribute, bool keep) {
  size_t first_test_arg = 0;
  std::string attribute;
  if (by_attribute) {
    TG_CHECK(!args.positional.empty(), "selectattr/rejectattr need an attribute name");
    attribute = args.positional[0].str();
    first_test_arg = 1;
  }
  CallArgs test_args;
  std::string test;
  if (args.positional.size() > first_test_arg) {
    test = args.positional[first_test_arg].str();
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(first_test_arg) + 1,
                                args.positional.end());
  }
  List out;
  for (const Value& item : iterate(value)) {
    const Value subject = by_attribute ? attribute_path(item, attribute) : item;
    const bool passes = test.empty() ? subject.truthy() : apply_test(test, subject, test_args);
    if (passes == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value filter_map(const Value& value, const CallArgs& args) {
  List out;
  if (const Value* attribute = args.get("attribute", static_cast<size_t>(-1))) {
    const Value* fallback = args.get("default", static_cast<size_t>(-1));
    for (const Value& item : iterate(value)) {
      Value v = attribute_path(item, attribute->str());
      out.push_back(v.is_undefined() && fallback ? *fallback : v);
    }
    return Value::list(std::move(out));
  }
  TG_CHECK(!args.positional.empty(), "map needs a filter name or attribute=");
  CallArgs filter_args;
  filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
  filter_args.keyword = args.keyword;
  for (const Value& item : iterate(value)) out.push_back(apply_filter(args.positional[0].str(), item, filter_args));
  return Value::list(std::move(out));
}

Value filter_sort(const Value& value, const CallArgs& args) {
  const bool reverse = bool_arg(args, "reverse", 0, false);
  const bool case_sensitive = bool_arg(args, "case_sensitive", 1, false);
  const Value* attribute = args.get("attribute", 2);
  List items = iterate(value);
  auto key = [&](const Value& v) { return attribute ? attribute_path(v, attribute->str()) : v; };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? sort_less(key(b), key(a), case_sensitive) : sort_less(key(a), key(b), case_sensitive);
  });
  return Value::list(std::move(items));
}

// A key equal for values Python takes as equal (1, 1.0 and True; strings by text).
std::string canonical_key(const Value& v) {
  if (v.is_number()) return "n" + Value::real(v.as_double()).repr();
  if (v.is_string()) return "s" + v.as_string();
  return "r" + v.repr();
}

Value filter_unique(const Value& value, const CallArgs& args) {
  const bool case_sensitive = bool_arg(args, "case_sensitive", 0, false);
  const Value* attribute = args.get("attribute", 1);
  List out;
  std::set<std::string> seen;
  for (const Value& item : iterate(value)) {
    Value key = attribute ? attribute_path(item, attribute->str()) : item;
    if (!case_sensitive && key.is_string()) key = Value::string(lower_text(key.as_string()));
    if (seen.insert(canonical_key(key)).second) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value filter_extreme(const Value& value, const CallArgs& args, bool want_max) {
  const bool case_sensitive = bool_arg(args, "case_sensitive", 0, false);
  const Value* attribute = args.get("attribute", 1);
  const List items = iterate(value);
  if (items.empty()) return Value::undefined(want_max ? "max of nothing" : "min of nothing");
  auto key = [&](const Value& v) { return attribute ? attribute_path(v, attribute->str()) : v; };
  const Value* best = &items[0];
  for (const Value& item : items) {
    const bool better = want_max ? sort_less(key(*best), key(item), case_sensitive)
                                 : sort_less(key(item), key(*best), case_sensitive);
    if (better) best = &item;
  }
  return *best;
}

Value filter_sum(const Value& value, const CallArgs& args) {
  const Value* attribute = args.get("attribute", 0);
  Value total = args.get("start", 1) ? *args.get("start", 1) : Value::integer(0);
  for (const Value& item : iterate(value)) {
    const Value v = attribute ? attribute_path(item, attribute->str()) : item;
    TG_CHECK(v.is_number() && total.is_number(), "sum: cannot add a {}", v.type_name());
    const bool integral = total.kind() != Value::Kind::Float && v.kind() != Value::Kind::Float;
    total = integral ? Value::integer(total.as_int() + v.as_int()) : Value::real(total.as_double() + v.as_double());
  }
  return total;
}

// jinja2's indent: every line but the first (and the first too with first=true)
// gets `width` spaces (or the width string); blank lines only with blank=true.
Value filter_indent(const Value& value, const CallArgs& args) {
  const Value* width_value = args.get("width", 0);
  std::string pad;
  if (width_value && width_value->is_string()) {
    pad = width_value->as_string();
  } else {
    const int64_t width = int_arg(args, "width", 0, 4);
    check_text_size(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(width, kMaxTextBytes + 1))), "indent");
    pad.assign(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
  }
  const bool first = bool_arg(args, "first", 1, false);
  const bool blank = bool_arg(args, "blank", 2, false);
  const std::string text = value.str();
  std::string out;
  size_t start = 0;
  bool first_line = true;
  for (;;) {
    const size_t newline = text.find('\n', start);
    const std::string line = text.substr(start, newline == std::string::npos ? std::string::npos : newline - start);
    const bool indent_it = first_line ? first : (blank || !line.empty());
    out += (indent_it ? pad : "") + line;
    check_text_size(out.size(), "indent");
    if (newline == std::string::npos) break;
    out += '\n';
    start = newline + 1;
    first_line = false;
  }
  return Value::string(out);
}

// Python's round(): to the nearest, ties to even, of the value's exact binary value
// (2.675 is 2.67499... and rounds to 2.67); an integer stays an integer.
Value filter_round(const Value& value, const CallArgs& args) {
  TG_CHECK(value.is_number(), "round: a {} is not a number", value.type_name());
  const int64_t precision = int_arg(args, "precision", 0, 0);
  const std::string method = string_arg(args, "method", 1, "common");
  TG_CHECK(method == "common" || method == "ceil" || method == "floor",
           "round: method must be common, ceil or floor, not {}", method);
  TG_CHECK(precision >= 0 && precision <= 15, "round: precision {} is not in [0, 15]", precision);
  if (method == "common") {
    if (value.kind() != Value::Kind::Float) return Value::integer(value.as_int());
    if (!std::isfinite(value.as_double())) return value;
    return Value::real(std::strtod(fmt::format("{:.{}f}", value.as_double(), precision).c_str(), nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = value.as_double() * scale;
  return Value::real((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value filter_int(const Value& value, const CallArgs& args) {
  const int64_t fallback = int_arg(args, "default", 0, 0);
  if (value.kind() == Value::Kind::Float) return Value::integer(to_integer(value.as_double(), "int"));
  if (value.is_number()) return Value::integer(value.as_int());
  if (value.is_string()) {
    const std::string s = strip_chars(value.as_string(), nullptr, true, true);
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && *end == '\0') {
      TG_CHECK(errno != ERANGE, "int: '{}' is past the 64-bit integers templates compute with", s);
      return Value::integer(i);
    }
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0' && std::isfinite(d)) return Value::integer(to_integer(d, "int"));
  }
  return Value::integer(fallback);
}

Value filter_float(const Value& value, const CallArgs& args) {
  const Value* fallback = args.get("default", 0);
  if (value.is_number()) return Value::real(value.as_double());
  if (value.is_string()) {
    const std::string s = strip_chars(value.as_string(), nullptr, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value::real(d);
  }
  return fallback ? *fallback : Value::real(0.0);
}

Value filter_items(const Value& value) {
  if (value.is_undefined()) return Value::list({});
  TG_CHECK(value.is_dict(), "items: a {} has no items", value.type_name());
  List out;
  for (const auto& [k, v] : value.entries()) out.push_back(Value::list({Value::string(k), v}));
  return Value::list(std::move(out));
}

Value filter_dictsort(const Value& value, const CallArgs& args) {
  const bool case_sensitive = bool_arg(args, "case_sensitive", 0, false);
  const bool by_value = string_arg(args, "by", 1, "key") == "value";
  const bool reverse = bool_arg(args, "reverse", 2, false);
  List pairs = filter_items(value).items();
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
    const Value& x = a.items()[by_value ? 1 : 0];
    const Value& y = b.items()[by_value ? 1 : 0];
    return reverse ? sort_less(y, x, case_sensitive) : sort_less(x, y, case_sensitive);
  });
  return Value::list(std::move(pairs));
}

// Hugging Face's tojson(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False): json.dumps with those arguments.
Value filter_tojson(const Value& value, const CallArgs& args) {
  JsonStyle style;
  style.ensure_ascii = bool_arg(args, "ensure_ascii", 0, false);
  style.sort_keys = bool_arg(args, "sort_keys", 3, false);
  if (const Value* indent = args.get("indent", 1); indent && !indent->is_none()) {
    style.indented = true;
    style.item_separator = ",";
    if (indent->is_string()) {
      style.indent = indent->as_string();
    } else {
      const int64_t width = int_arg(args, "indent", 1, 0);
      TG_CHECK(width <= 1024, "tojson: indent {} is more than 1024", width);
      style.indent.assign(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');  // <= 0: newlines only
    }
  }
  if (const Value* separators = args.get("separators", 2); separators && !separators->is_none()) {
    TG_CHECK(separators->is_list() && separators->items().size() == 2 && separators->items()[0].is_string() &&
                 separators->items()[1].is_string(),
             "tojson: separators must be two strings (item, key)");
    style.item_separator = separators->items()[0].as_string();
    style.key_separator = separators->items()[1].as_string();
  }
  return Value::string(value.to_json(style));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value first_or_last(const Value& value, bool last) {
  if (value.is_string()) {
    const std::string& s = value.as_string();
    if (s.empty()) return Value::undefined(last ? "last of an empty string" : "first of an empty string");
    if (!last) return Value::string(s.substr(0, code_point_bytes(s, 0)));
    const std::vector<size_t> offsets = code_point_offsets(s);
    return Value::string(s.substr(offsets[offsets.size() - 2]));
  }
  const List items = iterate(value);
  if (items.empty()) return Value::undefined(last ? "last of an empty sequence" : "first of an empty sequence");
  return last ? items.back() : items.front();
}

Value filter_reverse(const Value& value) {
  if (value.is_string()) {
    const std::string& s = value.as_string();
    const std::vector<size_t> offsets = code_point_offsets(s);
    std::string out;
    for (size_t k = offsets.size() - 1; k > 0; --k) out += s.substr(offsets[k - 1], offsets[k] - offsets[k - 1]);
    return Value::string(out);
  }
  List items = iterate(value);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

// ---- String and dict methods.
Value string_method(const std::string& s, const std::string& name, const CallArgs& args) {
  if (name == "strip") return Value::string(strip_chars(s, args.get("chars", 0), true, true));
  if (name == "lstrip") return Value::string(strip_chars(s, args.get("chars", 0), true, false));
  if (name == "rstrip") return Value::string(strip_chars(s, args.get("chars", 0), false, true));
  if (name == "upper") return Value::string(upper_text(s));
  if (name == "lower") return Value::string(lower_text(s));
  if (name == "title") return Value::string(title_text(s));
  if (name == "capitalize") return Value::string(capitalize_text(s));
  if (name == "split") return Value::list(split(s, args.get("sep", 0), int_arg(args, "maxsplit", 1, -1)));
  if (name == "splitlines") {
    List lines;
    size_t start = 0;
    const std::string text = replace_all(s, "\r\n", "\n", -1);
    while (start < text.size()) {
      const size_t nl = text.find('\n', start);
      lines.push_back(Value::string(text.substr(start, nl == std::string::npos ? std::string::npos : nl - start)));
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
    return Value::list(std::move(lines));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* affix = args.get("prefix", 0);
    TG_CHECK(affix != nullptr, "{}() needs an argument", name);
    const List options = affix->is_list() ? affix->items() : List{*affix};
    for (const Value& option : options) {
      TG_CHECK(option.is_string(), "{}() takes a string or a tuple of strings, not a {}", name, option.type_name());
      const std::string& a = option.as_string();
      const bool hit = name == "startswith" ? s.compare(0, a.size(), a) == 0
                                            : s.size() >= a.size() && s.compare(s.size() - a.size(), a.size(), a) == 0;
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "replace") {
    TG_CHECK(args.positional.size() >= 2, "replace() needs old and new");
    return Value::string(replace_all(s, args.positional[0].str(), args.positional[1].str(), int_arg(args, "count", 2, -1)));
  }
  if (name == "join") {
    TG_CHECK(!args.positional.empty(), "join() needs a sequence");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(args.positional[0])) {
      TG_CHECK(item.is_string(), "join(): expected str items, found a {}", item.type_name());
      out += (first ? "" : s) + item.as_string();
      check_text_size(out.size(), "join()");
      first = false;
    }
    return Value::string(out);
  }
  if (name == "find" || name == "count") {
    const std::string needle = string_arg(args, "sub", 0, "");
    if (name == "find") {
      const size_t at = s.find(needle);
      return Value::integer(at == std::string::npos ? -1 : code_point_count(std::string_view(s).substr(0, at)));
    }
    return Value::integer(static_cast<int64_t>(
        needle.empty() ? static_cast<size_t>(code_point_count(s)) + 1
                       : (s.size() - replace_all(s, needle, "", -1).size()) / needle.size()));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string a = string_arg(args, "affix", 0, "");
    if (name == "removeprefix" && s.compare(0, a.size(), a) == 0) return Value::string(s.substr(a.size()));
    if (name == "removesuffix" && s.size() >= a.size() && s.compare(s.size() - a.size(), a.size(), a) == 0) {
      return Value::string(s.substr(0, s.size() - a.size()));
    }
    return Value::string(s);
  }
  TG_THROW("str has no method {}()", name);
}

Value dict_method(const Value& d, const std::string& name, const CallArgs& args) {
  if (name == "items") return filter_items(d);
  List out;
  if (name == "keys" || name == "values") {
    for (const auto& [k, v] : d.entries()) out.push_back(name == "keys" ? Value::string(k) : v);
    return Value::list(std::move(out));
  }
  if (name == "get") {
    TG_CHECK(!args.positional.empty(), "get() needs a key");
    const Value* found = d.find(args.positional[0].str());
    if (found) return *found;
    return args.positional.size() > 1 ? args.positional[1] : Value::none();
  }
  TG_THROW("dict has no method {}()", name);
}

// ---- Globals.
Value range_function(const CallArgs& args) {
  TG_CHECK(!args.positional.empty() && args.positional.size() <= 3, "range() takes 1 to 3 integers");
  int64_t start = 0, stop = 0, step = 1;
  if (args.positional.size() == 1) {
    stop = int_arg(args, "stop", 0, 0);
  } else {
    start = int_arg(args, "start", 0, 0);
    stop = int_arg(args, "stop", 1, 0);
    step = int_arg(args, "step", 2, 1);
  }
  TG_CHECK(step != 0, "range() step must not be zero");
  List out;
  constexpr size_t kMaxRange = 1'000'000;  // a chat template counts messages, not millions
  for (__int128 i = start; step > 0 ? i < stop : i > stop; i += step) {  // 128-bit: no wrap near the ends
    TG_CHECK(out.size() < kMaxRange, "range() of more than {} numbers", kMaxRange);
    out.push_back(Value::integer(static_cast<int64_t>(i)));
  }
  return Value::list(std::move(out));
}

Value keyword_dict(const CallArgs& args, bool as_namespace) {
  Dict entries;
  if (!args.positional.empty() && args.positional[0].is_dict()) entries = args.positional[0].entries();
  for (const auto& keyword : args.keyword) {
    auto it = std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.first == keyword.first; });
    if (it != entries.end()) {
      it->second = keyword.second;
    } else {
      entries.push_back(keyword);
    }
  }
  return as_namespace ? Value::namespace_object(std::move(entries)) : Value::dict(std::move(entries));
}

Value strftime_now(const CallArgs& args) {
  const std::string format = string_arg(args, "format", 0, "%Y-%m-%d");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buffer[256];
  const size_t n = std::strftime(buffer, sizeof(buffer), format.c_str(), &local);
  return Value::string(std::string(buffer, n));
}

}  // namespace

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return code_point_count(v.as_string());
    case Value::Kind::List: return static_cast<int64_t>(v.items().size());
    case Value::Kind::Dict: return static_cast<int64_t>(v.entries().size());
    default: TG_THROW("object of type '{}' has no len()", v.type_name());
  }
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: return v.items();
    case Value::Kind::Dict: {
      List keys;
      for (const auto& entry : v.entries()) keys.push_back(Value::string(entry.first));
      return keys;
    }
    case Value::Kind::String: {
      const std::string& s = v.as_string();
      List chars;
      for (size_t i = 0; i < s.size(); i += code_point_bytes(s, i)) {
        chars.push_back(Value::string(s.substr(i, code_point_bytes(s, i))));
      }
      return chars;
    }
    default: TG_THROW("'{}' object is not iterable", v.type_name());
  }
}

Value apply_filter(const std::string& name, const Value& value, const CallArgs& args) {
  if (name == "trim") return Value::string(strip_chars(text_of(value, "trim"), args.get("chars", 0), true, true));
  if (name == "upper") return Value::string(upper_text(text_of(value, "upper")));
  if (name == "lower") return Value::string(lower_text(text_of(value, "lower")));
  if (name == "capitalize") return Value::string(capitalize_text(text_of(value, "capitalize")));
  if (name == "title") return Value::string(title_text(text_of(value, "title")));
  if (name == "length" || name == "count") return Value::integer(length_of(value));
  if (name == "first" || name == "last") return first_or_last(value, name == "last");
  if (name == "join") return filter_join(value, args);
  if (name == "default" || name == "d") return filter_default(value, args);
  if (name == "list") return Value::list(iterate(value));
  if (name == "string") return Value::string(value.str());
  if (name == "int") return filter_int(value, args);
  if (name == "float") return filter_float(value, args);
  if (name == "abs") {
    TG_CHECK(value.is_number(), "abs: a {} is not a number", value.type_name());
    if (value.kind() == Value::Kind::Float) return Value::real(std::fabs(value.as_double()));
    TG_CHECK(value.as_int() != INT64_MIN, "abs: integer overflow (templates compute in 64 bits)");
    return Value::integer(value.as_int() < 0 ? -value.as_int() : value.as_int());
  }
  if (name == "round") return filter_round(value, args);
  if (name == "tojson") {
    if (value.is_undefined()) undefined_error(value);
    return filter_tojson(value, args);
  }
  if (name == "items") return filter_items(value);
  if (name == "dictsort") return filter_dictsort(value, args);
  if (name == "select" || name == "reject") return filter_select(value, args, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return filter_select(value, args, true, name == "selectattr");
  if (name == "map") return filter_map(value, args);
  if (name == "unique") return filter_unique(value, args);
  if (name == "sort") return filter_sort(value, args);
  if (name == "reverse") return filter_reverse(value);
  if (name == "min" || name == "max") return filter_extreme(value, args, name == "max");
  if (name == "sum") return filter_sum(value, args);
  if (name == "replace") {
    TG_CHECK(args.positional.size() >= 2, "replace needs old and new");
    return Value::string(replace_all(text_of(value, "replace"), args.positional[0].str(), args.positional[1].str(),
                                     int_arg(args, "count", 2, -1)));
  }
  if (name == "safe") return value;
  if (name == "escape" || name == "e" || name == "forceescape") return Value::string(html_escape(value.str()));
  if (name == "indent") return filter_indent(value, args);
  if (name == "attr") return attribute_path(value, string_arg(args, "name", 0, ""));
  if (name == "wordcount") return Value::integer(static_cast<int64_t>(split(value.str(), nullptr, -1).size()));
  TG_THROW("no filter named '{}'", name);
}

bool apply_test(const std::string& name, const Value& value, const CallArgs& args) {
  using K = Value::Kind;
  const Value* other = args.get("other", 0);
  auto need_other = [&]() -> const Value& {
    TG_CHECK(other != nullptr, "the test '{}' needs a value to compare with", name);
    return *other;
  };
  if (name == "defined") return !value.is_undefined();
  if (name == "undefined") return value.is_undefined();
  if (name == "none") return value.is_none();
  if (name == "boolean") return value.kind() == K::Bool;
  if (name == "true") return value.kind() == K::Bool && value.as_bool();
  if (name == "false") return value.kind() == K::Bool && !value.as_bool();
  if (name == "integer") return value.kind() == K::Int;
  if (name == "float") return value.kind() == K::Float;
  if (name == "number") return value.is_number();
  if (name == "string") return value.is_string();
  if (name == "mapping") return value.is_dict();
  if (name == "iterable") return value.is_list() || value.is_dict() || value.is_string() || value.is_undefined();
  if (name == "sequence") return value.is_list() || value.is_dict() || value.is_string();
  if (name == "callable") return value.is_function();
  if (name == "sameas") return value.kind() == need_other().kind() && equal(value, *other);
  if (name == "equalto" || name == "eq" || name == "==") return equal(value, need_other());
  if (name == "ne" || name == "!=") return !equal(value, need_other());
  if (name == "lt" || name == "lessthan" || name == "<") return less(value, need_other());
  if (name == "le" || name == "<=") return !less(need_other(), value);
  if (name == "gt" || name == "greaterthan" || name == ">") return less(need_other(), value);
  if (name == "ge" || name == ">=") return !less(value, need_other());
  if (name == "in") {
    const Value& container = need_other();
    if (container.is_string()) return container.as_string().find(value.str()) != std::string::npos;
    if (container.is_dict()) return value.is_string() && container.find(value.as_string()) != nullptr;
    if (container.is_list()) {
      const List& items = container.items();
      return std::any_of(items.begin(), items.end(), [&](const Value& item) { return equal(item, value); });
    }
    if (container.is_undefined()) return false;
    TG_THROW("argument of type '{}' is not iterable", container.type_name());
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    TG_CHECK(value.kind() == K::Int || value.kind() == K::Bool, "the test '{}' needs an integer, not a {}", name,
             value.type_name());
    if (name == "divisibleby") {
      const int64_t d = need_other().as_int();
      TG_CHECK(d != 0, "divisibleby 0");
      return value.as_int() % d == 0;
    }
    return (value.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "lower" || name == "upper") {
    const std::string s = value.str();
    return s == (name == "lower" ? lower_text(s) : upper_text(s));
  }
  TG_THROW("no test named '{}'", name);
}

Value member_function(const Value& object, const std::string& name) {
  if (object.is_string()) {
    static const char* const kMethods[] = {"strip",      "lstrip",     "rstrip", "upper", "lower",      "title",
                                           "capitalize", "split",      "splitlines", "startswith", "endswith",
                                           "replace",    "join",       "find",   "count", "removeprefix", "removesuffix"};
    if (std::none_of(std::begin(kMethods), std::end(kMethods), [&](const char* m) { return name == m; })) {
      return Value::undefined(name);
    }
    const std::string s = object.as_string();
    return Value::function(name, [s, name](const CallArgs& args) { return string_method(s, name, args); });
  }
  if (object.is_dict() && !object.is_namespace() && (name == "items" || name == "keys" || name == "values" || name == "get")) {
    return Value::function(name, [object, name](const CallArgs& args) { return dict_method(object, name, args); });
  }
  return Value::undefined(name);
}

Value global_function(const std::string& name) {
  if (name == "raise_exception") {
    return Value::function(name, [](const CallArgs& args) -> Value {
      throw TemplateRaised(string_arg(args, "message", 0, "the chat template raised an exception"));
    });
  }
  if (name == "range") return Value::function(name, range_function);
  if (name == "namespace") return Value::function(name, [](const CallArgs& a) { return keyword_dict(a, true); });
  if (name == "dict") return Value::function(name, [](const CallArgs& a) { return keyword_dict(a, false); });
  if (name == "strftime_now") return Value::function(name, strftime_now);
  return Value::undefined(name);
}

}  // namespace tiergen::io::jinja
