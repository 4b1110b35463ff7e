#pragma once
// The values a chat template computes with, with the semantics of Jinja as Hugging Face
// runs it (Python's jinja2): Python's truthiness, equality (1 == 1.0 == True), str()
// and repr(), and Jinja's Undefined (prints as "", is false, iterates as empty, and is
// an error when used in arithmetic or looked into).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tiergen::io::jinja {

// Sizes no chat template comes near. A template that builds more is refused with an
// error instead of exhausting the host's memory or stack.
constexpr size_t kMaxTextBytes = size_t{64} << 20;
constexpr size_t kMaxItems = size_t{1} << 20;
constexpr int kMaxNesting = 256;  // lists and dicts inside each other
// Throws unless `bytes` is within kMaxTextBytes (`what` names the operation).
void check_text_size(size_t bytes, const char* what);

// How json.dumps writes a value (Hugging Face's tojson: ensure_ascii off by default).
struct JsonStyle {
  bool indented = false;
  std::string indent;  // per level, after a newline, when indented
  std::string item_separator = ", ", key_separator = ": ";
  bool ensure_ascii = false, sort_keys = false;
};

class Value;
using List = std::vector<Value>;
// Insertion-ordered, as Python dicts and JSON objects are; keys are strings.
using Dict = std::vector<std::pair<std::string, Value>>;

// Arguments of a call: positional, then keyword.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword `name`, else positional `index`, else nullptr.
  const Value* get(const std::string& name, size_t index) const;
};
using Function = std::function<Value(const CallArgs&)>;

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

  Value() = default;  // Undefined
  static Value undefined(std::string name) {
    Value v;
    v.text_ = std::move(name);
    return v;
  }
  static Value none() { return Value(Kind::None); }
  static Value boolean(bool b) {
    Value v(Kind::Bool);
    v.int_ = b;
    return v;
  }
  static Value integer(int64_t i) {
    Value v(Kind::Int);
    v.int_ = i;
    return v;
  }
  static Value real(double d) {
    Value v(Kind::Float);
    v.real_ = d;
    return v;
  }
  static Value string(std::string s) {
    Value v(Kind::String);
    v.text_ = std::move(s);
    return v;
  }
  static Value list(List items);
  static Value dict(Dict items);
  // A namespace() object: a dict whose attributes `set ns.x = ...` may assign.
  static Value namespace_object(Dict items);
  static Value function(std::string name, Function f);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Dict && namespace_; }
  bool is_function() const { return kind_ == Kind::Function; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // Int and Bool
  double as_double() const { return kind_ == Kind::Float ? real_ : static_cast<double>(int_); }
  const std::string& as_string() const { return text_; }
  // The name an Undefined was looked up by (for its error message) or a function's name.
  const std::string& name() const { return text_; }
  const List& items() const { return *list_; }
  const Dict& entries() const { return *dict_; }
  Dict& mutable_entries() const { return *dict_; }  // namespace attributes only
  const Function& call() const { return *function_; }

  // The entry `key` of a dict, or nullptr.
  const Value* find(const std::string& key) const;

  bool truthy() const;
  // Python's str(): what {{ value }} writes ("" for Undefined, "None", "True", "1.5").
  std::string str() const;
  // Python's repr(): strings quoted, as inside a printed list or dict.
  std::string repr() const;
  // json.dumps(value, ...) in `style`.
  std::string to_json(const JsonStyle& style = {}) const;
  // Lists and dicts nested inside this one (0 for a scalar).
  int depth() const { return depth_; }
  // Whether this is or holds a namespace() (which may not go inside a namespace: no cycles).
  bool holds_namespace() const;
  // Python's type name, for error messages ("str", "int", "list", "dict", "undefined").
  std::string type_name() const;

 private:
  explicit Value(Kind kind) : kind_(kind) {}
  void write_json(std::string& out, const JsonStyle& style, int level) const;

  Kind kind_ = Kind::Undefined;
  bool namespace_ = false;
  int depth_ = 0;
  int64_t int_ = 0;
  double real_ = 0;
  std::string text_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> function_;
};

// Python's ==: numbers by value (True == 1 == 1.0), strings, lists and dicts by content.
bool equal(const Value& a, const Value& b);
// Python's <, for numbers and for strings; anything else throws.
bool less(const Value& a, const Value& b);

}  // namespace tiergen::io::jinja
