#include "src/io/jinja/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "src/io/jinja/python_text.h"
#include "tiergen/common/error.h"

namespace tiergen::io::jinja {

const Value* CallArgs::get(const std::string& name, size_t index) const {
  for (const auto& [key, value] : keyword) {
    if (key == name) return &value;
  }
  return index < positional.size() ? &positional[index] : nullptr;
}

void check_text_size(size_t bytes, const char* what) {
  TG_CHECK(bytes <= kMaxTextBytes, "{} made a text of more than {} MiB", what, kMaxTextBytes >> 20);
}

namespace {

int nesting_of(int deepest_child) {
  TG_CHECK(deepest_child < kMaxNesting, "lists and dicts nested more than {} deep", kMaxNesting);
  return deepest_child + 1;
}

}  // namespace

Value Value::list(List items) {
  TG_CHECK(items.size() <= kMaxItems, "a list of more than {} items", kMaxItems);
  Value v(Kind::List);
  int deepest = 0;
  for (const Value& item : items) deepest = std::max(deepest, item.depth_);
  v.depth_ = nesting_of(deepest);
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::dict(Dict items) {
  TG_CHECK(items.size() <= kMaxItems, "a dict of more than {} items", kMaxItems);
  Value v(Kind::Dict);
  int deepest = 0;
  for (const auto& entry : items) deepest = std::max(deepest, entry.second.depth_);
  v.depth_ = nesting_of(deepest);
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}

bool Value::holds_namespace() const {
  if (is_namespace()) return true;
  if (kind_ == Kind::List) {
    return std::any_of(list_->begin(), list_->end(), [](const Value& v) { return v.holds_namespace(); });
  }
  if (kind_ == Kind::Dict) {
    return std::any_of(dict_->begin(), dict_->end(), [](const auto& e) { return e.second.holds_namespace(); });
  }
  return false;
}

Value Value::namespace_object(Dict items) {
  Value v = dict(std::move(items));
  v.namespace_ = true;
  return v;
}

Value Value::function(std::string name, Function f) {
  Value v(Kind::Function);
  v.text_ = std::move(name);
  v.function_ = std::make_shared<Function>(std::move(f));
  return v;
}

const Value* Value::find(const std::string& key) const {
  if (kind_ != Kind::Dict) return nullptr;
  for (const auto& [k, v] : *dict_) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool:
    case Kind::Int: return int_ != 0;
    case Kind::Float: return real_ != 0;
    case Kind::String: return !text_.empty();
    case Kind::List: return !list_->empty();
    case Kind::Dict: return !dict_->empty();
    case Kind::Function: return true;
  }
  return false;
}

namespace {

// Python's repr(float): the shortest text that reads back, always with a '.' or exponent.
std::string python_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string python_string_repr(const std::string& s) {
  const char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, quote);
  for (const unsigned char c : s) {
    if (c == '\\' || c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

void write_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (ensure_ascii && c >= 0x7F) {  // json.dumps escapes all but ' ' to '~' here
      const uint32_t cp = decode_code_point(s, i);
      i += code_point_bytes(s, i) - 1;
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", cp);
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

}  // namespace

std::string Value::str() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::String: return text_;
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return int_ ? "True" : "False";
    case Kind::Int: return std::to_string(int_);
    case Kind::Float: return python_float(real_);
    case Kind::String: return python_string_repr(text_);
    case Kind::List: {
      std::string out = "[";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].repr();
      return out + "]";
    }
    case Kind::Dict: {
      std::string out = namespace_ ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict_->size(); ++i) {
        out += (i ? ", " : "") + python_string_repr((*dict_)[i].first) + ": " + (*dict_)[i].second.repr();
      }
      return out + (namespace_ ? "}>" : "}");
    }
    case Kind::Function: return "<function " + text_ + ">";
  }
  return "";
}

std::string Value::to_json(const JsonStyle& style) const {
  std::string out;
  write_json(out, style, 0);
  return out;
}

void Value::write_json(std::string& out, const JsonStyle& style, int level) const {
  auto newline = [&](int at) {
    if (!style.indented) return;
    out += '\n';
    for (int i = 0; i < at; ++i) out += style.indent;
    check_text_size(out.size(), "tojson");
  };
  switch (kind_) {
    case Kind::Undefined: TG_THROW("tojson: the value is undefined");
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += int_ ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(int_); return;
    case Kind::Float:
      if (std::isnan(real_)) {
        out += "NaN";
      } else if (std::isinf(real_)) {
        out += real_ > 0 ? "Infinity" : "-Infinity";
      } else {
        out += python_float(real_);
      }
      return;
    case Kind::String: write_json_string(out, text_, style.ensure_ascii); break;
    case Kind::List:
      if (list_->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += style.item_separator;
        newline(level + 1);
        (*list_)[i].write_json(out, style, level + 1);
      }
      newline(level);
      out += ']';
      break;
    case Kind::Dict: {
      if (dict_->empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : *dict_) entries.push_back(&entry);
      if (style.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += style.item_separator;
        newline(level + 1);
        write_json_string(out, entries[i]->first, style.ensure_ascii);
        out += style.key_separator;
        entries[i]->second.write_json(out, style, level + 1);
      }
      newline(level);
      out += '}';
      break;
    }
    case Kind::Function: TG_THROW("tojson: a function ({}) is not JSON", text_);
  }
  check_text_size(out.size(), "tojson");
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Dict: return namespace_ ? "Namespace" : "dict";
    case Kind::Function: return "function";
  }
  return "";
}

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::Float || b.kind() == K::Float) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.as_string() == b.as_string();
    case K::List: {
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!equal(a.items()[i], b.items()[i])) return false;
      }
      return true;
    }
    case K::Dict: {
      if (a.entries().size() != b.entries().size()) return false;
      for (const auto& [key, value] : a.entries()) {
        const Value* other = b.find(key);
        if (other == nullptr || !equal(value, *other)) return false;
      }
      return true;
    }
    case K::Function: return a.name() == b.name();
    default: return false;  // numbers handled above
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  TG_THROW("'<' is not supported between a {} and a {}", a.type_name(), b.type_name());
}

}  // namespace tiergen::io::jinja
