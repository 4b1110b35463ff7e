#include "src/io/jinja/parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "tiergen/common/error.h"

namespace tiergen::io::jinja {

namespace {

using T = Token::Type;

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& where) : tokens_(tokens), where_(where) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, end);
    return body;
  }

 private:
  // Nesting deeper than any real template is refused before it can exhaust the stack.
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxDepth) parser.fail("the template nests deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };
  static constexpr int kMaxDepth = 200;

  // ---- Token access.
  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& t = peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  bool at_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).type == T::Name && peek(ahead).text == name;
  }
  bool at_operator(const char* op) const { return peek().type == T::Operator && peek().text == op; }
  bool accept_operator(const char* op) {
    if (!at_operator(op)) return false;
    next();
    return true;
  }
  bool accept_name(const char* name) {
    if (!at_name(name)) return false;
    next();
    return true;
  }

  [[noreturn]] void fail(const std::string& what) const {
    const Token& t = peek();
    const std::string found = t.type == T::End        ? "the end of the template"
                              : t.type == T::BlockEnd ? "'%}'"
                              : t.type == T::VarEnd   ? "'}}'"
                                                      : "'" + t.text + "'";
    TG_THROW("{} line {}: {} (found {})", where_, t.line, what, found);
  }
  void expect_operator(const char* op) {
    if (!accept_operator(op)) fail(std::string("expected '") + op + "'");
  }
  std::string expect_name(const char* what) {
    if (peek().type != T::Name) fail(std::string("expected ") + what);
    return next().text;
  }
  void expect_block_end() {
    if (peek().type != T::BlockEnd) fail("expected the end of the tag '%}'");
    next();
  }

  // ---- Statements.
  // Statements until a block tag named in `ends` (whose name is consumed and returned in
  // `end`) or, with no `ends`, until the end of the template.
  Body parse_body(const std::vector<std::string>& ends, std::string& end) {
    const DepthGuard guard(*this);
    Body body;
    for (;;) {
      const Token& t = peek();
      if (t.type == T::End) {
        if (!ends.empty()) fail("expected {% " + ends.back() + " %}");
        return body;
      }
      if (t.type == T::Text) {
        body.push_back(text_stmt(next()));
      } else if (t.type == T::VarBegin) {
        next();
        auto s = make_stmt(Stmt::Kind::Output, t.line);
        s->expr = parse_expression();
        if (peek().type != T::VarEnd) fail("expected the end of the expression '}}'");
        next();
        body.push_back(std::move(s));
      } else if (t.type == T::BlockBegin) {
        const Token& keyword = peek(1);
        if (keyword.type == T::Name && std::find(ends.begin(), ends.end(), keyword.text) != ends.end()) {
          next();
          end = next().text;
          return body;
        }
        next();
        if (StmtPtr s = parse_statement()) body.push_back(std::move(s));
      } else {
        fail("unexpected token");
      }
    }
  }

  StmtPtr make_stmt(Stmt::Kind kind, int line) const {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    return s;
  }
  StmtPtr text_stmt(const Token& t) const {
    auto s = make_stmt(Stmt::Kind::Text, t.line);
    s->text = t.text;
    return s;
  }

  StmtPtr parse_statement() {
    const int line = peek().line;
    const std::string keyword = expect_name("a tag name after '{%'");
    if (keyword == "if") return parse_if(line);
    if (keyword == "for") return parse_for(line);
    if (keyword == "set") return parse_set(line);
    if (keyword == "macro") return parse_macro(line);
    if (keyword == "break" || keyword == "continue") {
      if (loop_depth_ == 0) {
        --pos_;
        fail("{% " + keyword + " %} outside a for loop");
      }
      expect_block_end();
      return make_stmt(keyword == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, line);
    }
    if (keyword == "generation") return parse_generation(line);
    --pos_;
    fail("unknown tag '" + keyword + "'");
  }

  StmtPtr parse_if(int line) {
    auto s = make_stmt(Stmt::Kind::If, line);
    s->expr = parse_expression();
    expect_block_end();
    std::string end;
    s->body = parse_body({"elif", "else", "endif"}, end);
    if (end == "elif") {
      s->else_body.push_back(parse_if(peek().line));
    } else if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endif"}, end);
      expect_block_end();
    } else {
      expect_block_end();
    }
    return s;
  }

  StmtPtr parse_for(int line) {
    auto s = make_stmt(Stmt::Kind::For, line);
    const bool parenthesised = accept_operator("(");  // for (k, v) in ...
    do {
      s->targets.push_back(expect_name("a loop variable"));
    } while (accept_operator(","));
    if (parenthesised) expect_operator(")");
    if (!accept_name("in")) fail("expected 'in' in a for loop");
    s->expr = parse_conditional(/*allow_if=*/false);
    if (accept_name("if")) s->condition = parse_expression();
    accept_name("recursive");
    expect_block_end();
    std::string end;
    ++loop_depth_;
    s->body = parse_body({"else", "endfor"}, end);
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, end);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(int line) {
    auto s = make_stmt(Stmt::Kind::Set, line);
    s->targets.push_back(expect_name("a variable name after 'set'"));
    if (accept_operator(".")) {
      s->attribute = expect_name("an attribute name");
    } else {
      while (accept_operator(",")) s->targets.push_back(expect_name("a variable name"));  // set a, b = ...
    }
    if (peek().type == T::BlockEnd && s->attribute.empty() && s->targets.size() == 1) {
      next();
      s->kind = Stmt::Kind::SetBlock;
      std::string end;
      s->body = parse_body({"endset"}, end);
      expect_block_end();
      return s;
    }
    expect_operator("=");
    s->expr = parse_tuple_or_expression();
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro(int line) {
    auto s = make_stmt(Stmt::Kind::Macro, line);
    s->text = expect_name("a macro name");
    expect_operator("(");
    while (!accept_operator(")")) {
      if (!s->targets.empty()) expect_operator(",");
      if (accept_operator(")")) break;
      s->targets.push_back(expect_name("a parameter name"));
      s->defaults.push_back(accept_operator("=") ? parse_expression() : nullptr);
    }
    expect_block_end();
    std::string end;
    const int enclosing_loops = loop_depth_;
    loop_depth_ = 0;  // a macro is a function of its own: no break out of the caller's loop
    s->body = parse_body({"endmacro"}, end);
    loop_depth_ = enclosing_loops;
    if (peek().type == T::Name) next();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  // {% generation %}...{% endgeneration %} marks the assistant's tokens for training
  // masks; rendering it is rendering its body.
  StmtPtr parse_generation(int line) {
    expect_block_end();
    auto s = make_stmt(Stmt::Kind::If, line);
    s->expr = literal(Value::boolean(true), line);
    std::string end;
    s->body = parse_body({"endgeneration"}, end);
    expect_block_end();
    return s;
  }

  // ---- Expressions.
  // A node whose operands are attached: its depth, refused past kMaxDepth (a long
  // chain like 1+1+...+1 is parsed by a loop but evaluated and freed recursively).
  ExprPtr sized(ExprPtr e) const {
    int deepest = 0;
    for (const ExprPtr& o : e->operands) deepest = o ? std::max(deepest, o->depth) : deepest;
    for (const auto& k : e->keyword) deepest = std::max(deepest, k.second->depth);
    e->depth = deepest + 1;
    if (e->depth > kMaxDepth) fail("the expression nests deeper than " + std::to_string(kMaxDepth) + " levels");
    return e;
  }

  ExprPtr make_expr(Expr::Kind kind, int line) const {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  ExprPtr literal(Value v, int line) const {
    auto e = make_expr(Expr::Kind::Literal, line);
    e->literal = std::move(v);
    return e;
  }
  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right) const {
    auto e = make_expr(Expr::Kind::Binary, left->line);
    e->name = std::move(op);
    e->operands.push_back(std::move(left));
    e->operands.push_back(std::move(right));
    return sized(std::move(e));
  }

  ExprPtr parse_expression() { return parse_conditional(true); }

  // `a, b` (a tuple, as a list) or one expression: the right side of set.
  ExprPtr parse_tuple_or_expression() {
    ExprPtr first = parse_expression();
    if (!at_operator(",")) return first;
    auto tuple = make_expr(Expr::Kind::ListLiteral, first->line);
    tuple->operands.push_back(std::move(first));
    while (accept_operator(",")) {
      if (peek().type == T::BlockEnd) break;
      tuple->operands.push_back(parse_expression());
    }
    return sized(std::move(tuple));
  }

  ExprPtr parse_conditional(bool allow_if) {
    const DepthGuard guard(*this);
    ExprPtr value = parse_or();
    while (allow_if && at_name("if")) {
      next();
      auto e = make_expr(Expr::Kind::Conditional, value->line);
      e->operands.push_back(std::move(value));
      e->operands.push_back(parse_or());
      e->operands.push_back(accept_name("else") ? parse_conditional(true) : nullptr);
      value = sized(std::move(e));
    }
    return value;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (accept_name("or")) left = binary("or", std::move(left), parse_and());
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (accept_name("and")) left = binary("and", std::move(left), parse_not());
    return left;
  }

  ExprPtr parse_not() {
    const DepthGuard guard(*this);
    if (at_name("not")) {
      const int line = next().line;
      auto e = make_expr(Expr::Kind::Unary, line);
      e->name = "not";
      e->operands.push_back(parse_not());
      return sized(std::move(e));
    }
    return parse_compare();
  }

  // a < b <= c is (a < b) and (b <= c), each operand evaluated once, as in Python.
  ExprPtr parse_compare() {
    ExprPtr first = parse_additive();
    auto chain = make_expr(Expr::Kind::Compare, first->line);
    chain->operands.push_back(std::move(first));
    for (;;) {
      static const char* const kOps[] = {"==", "!=", "<", ">", "<=", ">="};
      const auto op = std::find_if(std::begin(kOps), std::end(kOps), [&](const char* o) { return at_operator(o); });
      if (op != std::end(kOps)) {
        next();
        chain->comparisons.push_back(*op);
      } else if (accept_name("in")) {
        chain->comparisons.push_back("in");
      } else if (at_name("not") && at_name("in", 1)) {
        pos_ += 2;
        chain->comparisons.push_back("not in");
      } else {
        break;
      }
      chain->operands.push_back(parse_additive());
    }
    if (chain->comparisons.empty()) return std::move(chain->operands[0]);
    if (chain->comparisons.size() == 1) {
      return binary(chain->comparisons[0], std::move(chain->operands[0]), std::move(chain->operands[1]));
    }
    return sized(std::move(chain));
  }

  ExprPtr parse_additive() {
    ExprPtr left = parse_concat();
    while (at_operator("+") || at_operator("-")) {
      const std::string op = next().text;
      left = binary(op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_multiplicative();
    while (accept_operator("~")) left = binary("~", std::move(left), parse_multiplicative());
    return left;
  }

  ExprPtr parse_multiplicative() {
    ExprPtr left = parse_power();
    while (at_operator("*") || at_operator("/") || at_operator("//") || at_operator("%")) {
      const std::string op = next().text;
      left = binary(op, std::move(left), parse_power());
    }
    return left;
  }

  ExprPtr parse_power() {
    ExprPtr left = parse_unary(true);
    while (accept_operator("**")) left = binary("**", std::move(left), parse_unary(true));
    return left;
  }

  ExprPtr parse_unary(bool with_filters) {
    const DepthGuard guard(*this);
    ExprPtr e;
    if (at_operator("-") || at_operator("+")) {
      const Token& t = next();
      e = make_expr(Expr::Kind::Unary, t.line);
      e->name = t.text;
      e->operands.push_back(parse_unary(false));
      e = sized(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    return with_filters ? parse_filters_and_tests(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& t = next();
    switch (t.type) {
      case T::Name:
        if (t.text == "true" || t.text == "True") return literal(Value::boolean(true), t.line);
        if (t.text == "false" || t.text == "False") return literal(Value::boolean(false), t.line);
        if (t.text == "none" || t.text == "None") return literal(Value::none(), t.line);
        {
          auto e = make_expr(Expr::Kind::Name, t.line);
          e->name = t.text;
          return e;
        }
      case T::String: {
        std::string text = t.text;
        while (peek().type == T::String) text += next().text;  // 'a' 'b' is 'ab'
        return literal(Value::string(std::move(text)), t.line);
      }
      case T::Integer: {
        errno = 0;
        const long long value = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE) {
          --pos_;
          fail("an integer past 64 bits (templates compute in 64 bits)");
        }
        return literal(Value::integer(value), t.line);
      }
      case T::Float: return literal(Value::real(std::strtod(t.text.c_str(), nullptr)), t.line);
      case T::Operator:
        if (t.text == "(") return parse_parenthesised(t.line);
        if (t.text == "[") return parse_sequence(t.line, "]");
        if (t.text == "{") return parse_dict(t.line);
        break;
      default: break;
    }
    --pos_;
    fail("expected a value");
  }

  // `(e)` is e; `()`, `(e,)` and `(a, b)` are tuples (lists here).
  ExprPtr parse_parenthesised(int line) {
    if (accept_operator(")")) return make_expr(Expr::Kind::ListLiteral, line);
    ExprPtr first = parse_expression();
    if (accept_operator(")")) return first;
    expect_operator(",");
    auto tuple = make_expr(Expr::Kind::ListLiteral, line);
    tuple->operands.push_back(std::move(first));
    while (!accept_operator(")")) {
      tuple->operands.push_back(parse_expression());
      if (!at_operator(")")) expect_operator(",");
    }
    return sized(std::move(tuple));
  }

  ExprPtr parse_sequence(int line, const char* close) {
    auto list = make_expr(Expr::Kind::ListLiteral, line);
    while (!accept_operator(close)) {
      list->operands.push_back(parse_expression());
      if (!at_operator(close)) expect_operator(",");
    }
    return sized(std::move(list));
  }

  ExprPtr parse_dict(int line) {
    auto dict = make_expr(Expr::Kind::DictLiteral, line);
    while (!accept_operator("}")) {
      dict->operands.push_back(parse_expression());
      expect_operator(":");
      dict->operands.push_back(parse_expression());
      if (!at_operator("}")) expect_operator(",");
    }
    return sized(std::move(dict));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (accept_operator(".")) {
        auto a = make_expr(Expr::Kind::Attribute, e->line);
        if (peek().type == T::Integer) {  // x.0 is x[0]
          a->kind = Expr::Kind::Index;
          a->operands.push_back(std::move(e));
          a->operands.push_back(parse_primary());
        } else {
          a->name = expect_name("an attribute name after '.'");
          a->operands.push_back(std::move(e));
        }
        e = sized(std::move(a));
      } else if (accept_operator("[")) {
        e = sized(parse_subscript(std::move(e)));
      } else if (at_operator("(")) {
        next();
        auto call = make_expr(Expr::Kind::Call, e->line);
        call->operands.push_back(std::move(e));
        parse_call_arguments(*call);
        e = sized(std::move(call));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    const int line = object->line;
    ExprPtr start = at_operator(":") ? nullptr : parse_expression();
    if (accept_operator("]")) {
      auto index = make_expr(Expr::Kind::Index, line);
      index->operands.push_back(std::move(object));
      index->operands.push_back(std::move(start));
      return index;
    }
    expect_operator(":");
    auto slice = make_expr(Expr::Kind::Slice, line);
    slice->operands.push_back(std::move(object));
    slice->operands.push_back(std::move(start));
    slice->operands.push_back(at_operator(":") || at_operator("]") ? nullptr : parse_expression());
    ExprPtr step;
    if (accept_operator(":") && !at_operator("]")) step = parse_expression();
    slice->operands.push_back(std::move(step));
    expect_operator("]");
    return slice;
  }

  // After '(' : positional then keyword arguments up to ')'.
  void parse_call_arguments(Expr& call) {
    while (!accept_operator(")")) {
      if (peek().type == T::Name && peek(1).type == T::Operator && peek(1).text == "=") {
        std::string key = next().text;
        next();
        call.keyword.emplace_back(std::move(key), parse_expression());
      } else {
        if (!call.keyword.empty()) fail("a positional argument after a keyword argument");
        call.operands.push_back(parse_expression());
      }
      if (!at_operator(")")) expect_operator(",");
    }
  }

  ExprPtr parse_filters_and_tests(ExprPtr e) {
    for (;;) {
      if (accept_operator("|")) {
        auto f = make_expr(Expr::Kind::Filter, e->line);
        f->name = expect_name("a filter name after '|'");
        while (accept_operator(".")) f->name += "." + expect_name("a filter name");
        f->operands.push_back(std::move(e));
        if (accept_operator("(")) parse_call_arguments(*f);
        e = sized(std::move(f));
      } else if (at_name("is")) {
        next();
        auto t = make_expr(Expr::Kind::Test, e->line);
        t->negated = accept_name("not");
        t->name = expect_name("a test name after 'is'");
        t->operands.push_back(std::move(e));
        if (accept_operator("(")) {
          parse_call_arguments(*t);
        } else if (test_argument_follows()) {
          t->operands.push_back(parse_postfix(parse_primary()));
        }
        e = sized(std::move(t));
      } else {
        return e;
      }
    }
  }

  // `x is sameas false`, `x is divisibleby 3`: a test takes one bare argument when a
  // value follows (not an operator word).
  bool test_argument_follows() const {
    const Token& t = peek();
    if (t.type == T::String || t.type == T::Integer || t.type == T::Float) return true;
    if (t.type == T::Operator) return t.text == "[" || t.text == "{";
    if (t.type != T::Name) return false;
    static const char* const kStop[] = {"else", "or", "and", "if", "in", "is", "not"};
    return std::none_of(std::begin(kStop), std::end(kStop), [&](const char* w) { return t.text == w; });
  }

  const std::vector<Token>& tokens_;
  const std::string& where_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens, const std::string& where) {
  return Parser(tokens, where).parse_template();
}

}  // namespace tiergen::io::jinja
