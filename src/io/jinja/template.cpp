#include "src/io/jinja/template.h"

#include <cmath>
#include <unordered_map>

#include "src/io/jinja/lexer.h"
#include "src/io/jinja/parser.h"
#include "src/io/jinja/python_text.h"

namespace tiergen::io::jinja {

namespace {

using Frame = std::unordered_map<std::string, Value>;

// Python's slice indices for a sequence of `size` items.
std::vector<size_t> slice_indices(int64_t size, const Value& start_v, const Value& stop_v, const Value& step_v) {
  const bool integer_step = step_v.kind() == Value::Kind::Int || step_v.kind() == Value::Kind::Bool;
  TG_CHECK(step_v.is_undefined() || step_v.is_none() || integer_step, "slice indices must be integers");
  const int64_t step = integer_step ? step_v.as_int() : 1;
  TG_CHECK(step != 0, "slice step cannot be zero");
  auto bound = [&](const Value& v, int64_t fallback) {
    if (v.is_undefined() || v.is_none()) return fallback;
    TG_CHECK(v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Bool, "slice indices must be integers");
    int64_t i = v.as_int();
    if (i < 0) i += size;
    return step > 0 ? std::clamp<int64_t>(i, 0, size) : std::clamp<int64_t>(i, -1, size - 1);
  };
  const int64_t start = bound(start_v, step > 0 ? 0 : size - 1);
  const int64_t stop = bound(stop_v, step > 0 ? size : -1);
  std::vector<size_t> out;
  // 128-bit, so that a step near 2^63 cannot wrap past the end.
  for (__int128 i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(static_cast<size_t>(i));
  return out;
}

// Python's integers are unbounded; these are 64-bit, and a result past that is an
// error rather than a wrapped number.
[[noreturn]] void integer_overflow(const std::string& op) {
  TG_THROW("integer overflow in {} (templates compute in 64 bits)", op);
}

Value integer_arithmetic(const std::string& op, int64_t i, int64_t j) {
  int64_t r = 0;
  if (op == "+" || op == "-" || op == "*") {
    const bool overflow = op == "+"   ? __builtin_add_overflow(i, j, &r)
                          : op == "-" ? __builtin_sub_overflow(i, j, &r)
                                      : __builtin_mul_overflow(i, j, &r);
    if (overflow) integer_overflow(op);
    return Value::integer(r);
  }
  if (op == "**") {
    if (j < 0) return Value::real(std::pow(static_cast<double>(i), static_cast<double>(j)));
    int64_t result = 1, base = i;
    for (int64_t e = j; e > 0; e >>= 1) {  // by squaring, each product checked
      if ((e & 1) && __builtin_mul_overflow(result, base, &result)) integer_overflow(op);
      if (e > 1 && __builtin_mul_overflow(base, base, &base)) integer_overflow(op);
    }
    return Value::integer(result);
  }
  TG_CHECK(j != 0, "integer division or modulo by zero");
  if (i == INT64_MIN && j == -1) {
    if (op == "%") return Value::integer(0);
    integer_overflow(op);
  }
  const int64_t q = i / j - ((i % j != 0) && ((i < 0) != (j < 0)) ? 1 : 0);  // floor, as Python
  if (op == "//") return Value::integer(q);
  if (op == "%") return Value::integer(i - q * j);
  TG_THROW("unknown operator {}", op);
}

// Python's arithmetic on two values: + - * / // % **, and ~ (concatenation as text).
Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    check_text_size(a.str().size() + b.str().size(), "~");
    return Value::string(a.str() + b.str());
  }
  if (a.is_undefined()) TG_THROW("'{}' is undefined", a.name());
  if (b.is_undefined()) TG_THROW("'{}' is undefined", b.name());
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      check_text_size(a.as_string().size() + b.as_string().size(), "+");
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      TG_CHECK(a.items().size() + b.items().size() <= kMaxItems, "+ made a list of more than {} items", kMaxItems);
      List joined = a.items();
      joined.insert(joined.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(joined));
    }
  }
  if (op == "*" && ((a.is_string() || a.is_list()) != (b.is_string() || b.is_list()))) {
    const Value& sequence = a.is_string() || a.is_list() ? a : b;
    const Value& times = a.is_string() || a.is_list() ? b : a;
    TG_CHECK(times.kind() == Value::Kind::Int || times.kind() == Value::Kind::Bool, "can't multiply a sequence by a {}",
             times.type_name());
    const size_t unit = sequence.is_string() ? sequence.as_string().size() : sequence.items().size();
    const int64_t n = unit == 0 ? 0 : std::max<int64_t>(times.as_int(), 0);
    if (sequence.is_string()) {
      check_text_size(unit * static_cast<size_t>(std::min<int64_t>(n, kMaxTextBytes + 1)), "*");
    } else {
      TG_CHECK(unit * static_cast<size_t>(std::min<int64_t>(n, kMaxItems + 1)) <= kMaxItems,
               "* made a list of more than {} items", kMaxItems);
    }
    std::string text;
    List items;
    for (int64_t i = 0; i < n; ++i) {
      if (sequence.is_string()) {
        text += sequence.as_string();
      } else {
        items.insert(items.end(), sequence.items().begin(), sequence.items().end());
      }
    }
    return sequence.is_string() ? Value::string(text) : Value::list(std::move(items));
  }
  if (!a.is_number() || !b.is_number()) {
    TG_THROW("unsupported operand types for {}: '{}' and '{}'", op, a.type_name(), b.type_name());
  }
  const bool integral = a.kind() != Value::Kind::Float && b.kind() != Value::Kind::Float;
  const double x = a.as_double(), y = b.as_double();
  if (op == "/") {
    TG_CHECK(y != 0, "division by zero");
    return Value::real(x / y);
  }
  if (integral) return integer_arithmetic(op, a.as_int(), b.as_int());
  if (op == "+") return Value::real(x + y);
  if (op == "-") return Value::real(x - y);
  if (op == "*") return Value::real(x * y);
  if (op == "**") return Value::real(std::pow(x, y));
  TG_CHECK(y != 0, "float division or modulo by zero");
  if (op == "//") return Value::real(std::floor(x / y));
  if (op == "%") return Value::real(x - std::floor(x / y) * y);
  TG_THROW("unknown operator {}", op);
}

class Interpreter {
 public:
  explicit Interpreter(const Dict& variables) {
    frames_.emplace_back();
    for (const auto& [name, value] : variables) frames_.back()[name] = value;
  }

  std::string run(const Body& body) {
    std::string out;
    exec(body, out);
    return out;
  }

  int line() const { return line_; }

 private:
  enum class Flow { Normal, Break, Continue };

  // Limits no real chat template comes near; a template that reaches one is refused
  // instead of eating the host.
  static constexpr int64_t kMaxSteps = 50'000'000;
  static constexpr int kMaxCallDepth = 64;

  Flow exec(const Body& body, std::string& out) {
    for (const StmtPtr& s : body) {
      const Flow flow = exec(*s, out);
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt& s, std::string& out) {
    line_ = s.line;
    TG_CHECK(++steps_ <= kMaxSteps, "the template ran more than {} steps", kMaxSteps);
    switch (s.kind) {
      case Stmt::Kind::Text: out += s.text; break;
      case Stmt::Kind::Output: out += eval(*s.expr).str(); break;
      case Stmt::Kind::If: return exec(eval(*s.expr).truthy() ? s.body : s.else_body, out);
      case Stmt::Kind::For: exec_for(s, out); break;
      case Stmt::Kind::Set: assign(s, eval(*s.expr)); break;
      case Stmt::Kind::SetBlock: {
        std::string captured;
        exec(s.body, captured);
        assign(s, Value::string(std::move(captured)));
        break;
      }
      case Stmt::Kind::Macro: frames_.back()[s.text] = make_macro(s); break;
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
    }
    check_text_size(out.size(), "the template's output");
    return Flow::Normal;
  }

  void assign(const Stmt& s, Value value) {
    if (s.targets.size() > 1) {  // set a, b = ...
      bind_targets(frames_.back(), s.targets, value);
      return;
    }
    if (s.attribute.empty()) {
      frames_.back()[s.targets[0]] = std::move(value);
      return;
    }
    const Value target = lookup(s.targets[0]);
    TG_CHECK(target.is_namespace(), "cannot assign the attribute '{}' of {} (a {}; only a namespace() takes attributes)",
             s.attribute, s.targets[0], target.type_name());
    TG_CHECK(!value.holds_namespace(), "{}.{}: a namespace() cannot hold a namespace (no cycles)", s.targets[0],
             s.attribute);
    Dict& entries = target.mutable_entries();
    for (auto& entry : entries) {
      if (entry.first == s.attribute) {
        entry.second = std::move(value);
        return;
      }
    }
    entries.emplace_back(s.attribute, std::move(value));
  }

  void bind_targets(Frame& frame, const std::vector<std::string>& targets, const Value& item) {
    if (targets.size() == 1) {
      frame[targets[0]] = item;
      return;
    }
    const List parts = iterate(item);
    TG_CHECK(parts.size() == targets.size(), "cannot unpack {} values into {} variables", parts.size(),
             targets.size());
    for (size_t i = 0; i < targets.size(); ++i) frame[targets[i]] = parts[i];
  }

  void exec_for(const Stmt& s, std::string& out) {
    List items = iterate(eval(*s.expr));
    steps_ += static_cast<int64_t>(items.size());
    if (s.condition) {  // {% for x in xs if cond %}: the loop sees only what passes
      List kept;
      for (const Value& item : items) {
        frames_.emplace_back();
        bind_targets(frames_.back(), s.targets, item);
        const bool keep = eval(*s.condition).truthy();
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(s.else_body, out);
      return;
    }
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      frames_.emplace_back();  // each pass has its own scope, as in Jinja
      bind_targets(frames_.back(), s.targets, items[static_cast<size_t>(i)]);
      frames_.back()["loop"] = loop_object(items, i);
      const Flow flow = exec(s.body, out);
      frames_.pop_back();
      if (flow == Flow::Break) break;
    }
  }

  static Value loop_object(const List& items, int64_t i) {
    const auto n = static_cast<int64_t>(items.size());
    Dict loop = {{"index", Value::integer(i + 1)},       {"index0", Value::integer(i)},
                 {"revindex", Value::integer(n - i)},    {"revindex0", Value::integer(n - i - 1)},
                 {"first", Value::boolean(i == 0)},      {"last", Value::boolean(i == n - 1)},
                 {"length", Value::integer(n)}};
    if (i > 0) loop.emplace_back("previtem", items[static_cast<size_t>(i - 1)]);
    if (i + 1 < n) loop.emplace_back("nextitem", items[static_cast<size_t>(i + 1)]);
    loop.emplace_back("cycle", Value::function("cycle", [i](const CallArgs& args) {
                        TG_CHECK(!args.positional.empty(), "loop.cycle() needs at least one value");
                        return args.positional[static_cast<size_t>(i) % args.positional.size()];
                      }));
    return Value::dict(std::move(loop));
  }

  // A macro is a function: its parameters (defaults evaluated at the call) over the
  // local names visible where it was defined (captured then, as jinja2's closures are)
  // and the template's top-level names as they are at the call (so macros may call
  // themselves and each other).
  Value make_macro(const Stmt& s) {
    auto scope = std::make_shared<const std::vector<Frame>>(frames_.begin() + 1, frames_.end());
    return Value::function(s.text, [this, &s, scope](const CallArgs& args) {
      TG_CHECK(args.positional.size() <= s.targets.size(), "macro {}() takes {} arguments, {} given", s.text,
               s.targets.size(), args.positional.size());
      for (const auto& keyword : args.keyword) {
        TG_CHECK(std::find(s.targets.begin(), s.targets.end(), keyword.first) != s.targets.end(),
                 "macro {}() has no parameter '{}'", s.text, keyword.first);
      }
      TG_CHECK(call_depth_ < kMaxCallDepth, "macro {}() nests deeper than {} calls", s.text, kMaxCallDepth);
      std::vector<Frame> caller = std::move(frames_);
      frames_ = {caller.front()};
      frames_.insert(frames_.end(), scope->begin(), scope->end());
      frames_.emplace_back();
      const int caller_line = line_;
      ++call_depth_;
      std::string out;
      try {
        for (size_t i = 0; i < s.targets.size(); ++i) {
          const Value* given = args.get(s.targets[i], i);
          frames_.back()[s.targets[i]] =
              given ? *given : s.defaults[i] ? eval(*s.defaults[i]) : Value::undefined(s.targets[i]);
        }
        exec(s.body, out);
      } catch (...) {
        --call_depth_;
        frames_ = std::move(caller);
        throw;
      }
      --call_depth_;
      frames_ = std::move(caller);
      line_ = caller_line;
      return Value::string(std::move(out));
    });
  }

  Value lookup(const std::string& name) const {
    for (auto frame = frames_.rbegin(); frame != frames_.rend(); ++frame) {
      const auto it = frame->find(name);
      if (it != frame->end()) return it->second;
    }
    return global_function(name);
  }

  CallArgs evaluate_arguments(const Expr& e, size_t first) {
    CallArgs args;
    for (size_t i = first; i < e.operands.size(); ++i) args.positional.push_back(eval(*e.operands[i]));
    for (const auto& [key, value] : e.keyword) args.keyword.emplace_back(key, eval(*value));
    return args;
  }

  // Every value computed is charged its size against the step budget, so that work
  // proportional to big lists and strings (copies, `in`, filters) is bounded too.
  Value eval(const Expr& e) {
    Value v = evaluate(e);
    steps_ += 1 + cost_of(v);
    TG_CHECK(steps_ <= kMaxSteps, "the template ran more than {} steps", kMaxSteps);
    return v;
  }

  static int64_t cost_of(const Value& v) {
    if (v.is_list()) return static_cast<int64_t>(v.items().size());
    if (v.is_dict()) return static_cast<int64_t>(v.entries().size());
    if (v.is_string()) return static_cast<int64_t>(v.as_string().size() / 8);
    return 0;
  }

  Value evaluate(const Expr& e) {
    line_ = e.line;
    switch (e.kind) {
      case Expr::Kind::Literal: return e.literal;
      case Expr::Kind::Name: return lookup(e.name);
      case Expr::Kind::ListLiteral: {
        List items;
        for (const ExprPtr& item : e.operands) items.push_back(eval(*item));
        return Value::list(std::move(items));
      }
      case Expr::Kind::DictLiteral: return eval_dict(e);
      case Expr::Kind::Attribute: return attribute(eval(*e.operands[0]), e.name);
      case Expr::Kind::Index: {
        const Value object = eval(*e.operands[0]);  // left to right, as Python
        return index(object, eval(*e.operands[1]));
      }
      case Expr::Kind::Compare: return Value::boolean(compare_chain(e));
      case Expr::Kind::Slice: return slice(e);
      case Expr::Kind::Call: {
        const Value callee = eval(*e.operands[0]);
        if (callee.is_undefined()) TG_THROW("'{}' is undefined (not a function this template can call)", callee.name());
        TG_CHECK(callee.is_function(), "a {} is not callable", callee.type_name());
        return callee.call()(evaluate_arguments(e, 1));
      }
      case Expr::Kind::Filter: {
        const Value value = eval(*e.operands[0]);
        return apply_filter(e.name, value, evaluate_arguments(e, 1));
      }
      case Expr::Kind::Test: {
        const Value value = eval(*e.operands[0]);
        return Value::boolean(apply_test(e.name, value, evaluate_arguments(e, 1)) != e.negated);
      }
      case Expr::Kind::Unary: return unary(e.name, eval(*e.operands[0]));
      case Expr::Kind::Binary: return binary(e);
      case Expr::Kind::Conditional:
        if (eval(*e.operands[1]).truthy()) return eval(*e.operands[0]);
        return e.operands[2] ? eval(*e.operands[2]) : Value::undefined("the else of a conditional");
    }
    return Value();
  }

  Value eval_dict(const Expr& e) {
    Dict entries;
    for (size_t i = 0; i + 1 < e.operands.size(); i += 2) {
      const Value key = eval(*e.operands[i]);
      TG_CHECK(key.is_string(), "dict keys must be strings here, not a {}", key.type_name());
      Value value = eval(*e.operands[i + 1]);
      auto it = std::find_if(entries.begin(), entries.end(), [&](const auto& x) { return x.first == key.as_string(); });
      if (it != entries.end()) {
        it->second = std::move(value);
      } else {
        entries.emplace_back(key.as_string(), std::move(value));
      }
    }
    return Value::dict(std::move(entries));
  }

  static Value attribute(const Value& object, const std::string& name) {
    // As jinja2's getattr: a method of that name first (d.items), then the item.
    if (object.is_undefined()) TG_THROW("'{}' is undefined (looking up .{})", object.name(), name);
    const Value method = member_function(object, name);
    if (!method.is_undefined()) return method;
    if (const Value* found = object.find(name)) return *found;
    return Value::undefined(name);
  }

  static Value index(const Value& object, const Value& key) {
    if (object.is_undefined()) TG_THROW("'{}' is undefined (looking up [{}])", object.name(), key.repr());
    if (object.is_dict()) {
      if (!key.is_string()) return Value::undefined("[" + key.repr() + "]");  // keys are strings: no such item
      const Value* found = object.find(key.as_string());
      return found ? *found : Value::undefined(key.as_string());
    }
    if (object.is_list() || object.is_string()) {
      if (key.is_string()) return attribute(object, key.as_string());
      TG_CHECK(key.kind() == Value::Kind::Int || key.kind() == Value::Kind::Bool, "indices must be integers, not a {}",
               key.type_name());
      // No copy of the list, and a string's code points found by their offsets (no
      // value per character).
      const std::vector<size_t> offsets =
          object.is_string() ? code_point_offsets(object.as_string()) : std::vector<size_t>{};
      const auto size = static_cast<int64_t>(object.is_list() ? object.items().size() : offsets.size() - 1);
      int64_t i = key.as_int();
      if (i < 0) i += size;
      if (i < 0 || i >= size) return Value::undefined("[" + key.repr() + "]");
      const auto k = static_cast<size_t>(i);
      if (object.is_list()) return object.items()[k];
      return Value::string(object.as_string().substr(offsets[k], offsets[k + 1] - offsets[k]));
    }
    return Value::undefined("[" + key.repr() + "]");
  }

  Value slice(const Expr& e) {
    const Value object = eval(*e.operands[0]);
    auto part = [&](size_t i) { return e.operands[i] ? eval(*e.operands[i]) : Value(); };
    const Value start = part(1), stop = part(2), step = part(3);
    if (object.is_undefined()) TG_THROW("'{}' is undefined (slicing it)", object.name());
    TG_CHECK(object.is_list() || object.is_string(), "a {} cannot be sliced", object.type_name());
    if (object.is_list()) {
      List picked;
      for (const size_t i : slice_indices(static_cast<int64_t>(object.items().size()), start, stop, step)) {
        picked.push_back(object.items()[i]);
      }
      return Value::list(std::move(picked));
    }
    const std::string& s = object.as_string();
    const std::vector<size_t> offsets = code_point_offsets(s);
    std::string text;
    for (const size_t i : slice_indices(static_cast<int64_t>(offsets.size() - 1), start, stop, step)) {
      text += s.substr(offsets[i], offsets[i + 1] - offsets[i]);
    }
    return Value::string(text);
  }

  static Value unary(const std::string& op, const Value& v) {
    if (op == "not") return Value::boolean(!v.truthy());
    if (v.is_undefined()) TG_THROW("'{}' is undefined", v.name());
    TG_CHECK(v.is_number(), "bad operand type for unary {}: '{}'", op, v.type_name());
    if (v.kind() == Value::Kind::Float) return op == "+" ? v : Value::real(-v.as_double());
    return op == "+" ? Value::integer(v.as_int()) : integer_arithmetic("-", 0, v.as_int());
  }

  static bool is_comparison(const std::string& op) {
    return op == "==" || op == "!=" || op == "<" || op == ">" || op == "<=" || op == ">=" || op == "in" ||
           op == "not in";
  }

  static bool compare(const std::string& op, const Value& left, const Value& right) {
    if (op == "==") return equal(left, right);
    if (op == "!=") return !equal(left, right);
    if (op == "<") return less(left, right);
    if (op == ">") return less(right, left);
    if (op == "<=") return !less(right, left);
    if (op == ">=") return !less(left, right);
    CallArgs container;
    container.positional.push_back(right);
    return apply_test("in", left, container) == (op == "in");
  }

  bool compare_chain(const Expr& e) {
    Value left = eval(*e.operands[0]);
    for (size_t k = 0; k < e.comparisons.size(); ++k) {
      Value right = eval(*e.operands[k + 1]);
      if (!compare(e.comparisons[k], left, right)) return false;
      left = std::move(right);
    }
    return true;
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    const Value left = eval(*e.operands[0]);
    if (op == "and") return left.truthy() ? eval(*e.operands[1]) : left;
    if (op == "or") return left.truthy() ? left : eval(*e.operands[1]);
    const Value right = eval(*e.operands[1]);
    if (is_comparison(op)) return Value::boolean(compare(op, left, right));
    return arithmetic(op, left, right);
  }

  std::vector<Frame> frames_;
  int line_ = 0;
  int64_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace

Template::Template(const std::string& source, std::string where)
    : where_(std::move(where)), body_(std::make_shared<Body>(parse(tokenize(source, where_), where_))) {}

std::string Template::render(const Dict& variables) const {
  Interpreter interpreter(variables);
  try {
    return interpreter.run(*body_);
  } catch (const TemplateRaised&) {
    throw;
  } catch (const Error& e) {
    TG_THROW("{} line {}: {}", where_, interpreter.line(), e.what());
  }
}

}  // namespace tiergen::io::jinja
