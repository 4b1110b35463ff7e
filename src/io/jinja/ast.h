#pragma once
// The parsed form of a template: statements holding expressions. One node type per
// level keeps the tree small; `kind` says which fields a node uses.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/io/jinja/value.h"

namespace tiergen::io::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,      // literal
    Name,         // name
    ListLiteral,  // operands: items (also a tuple)
    DictLiteral,  // operands: key, value, key, value, ...
    Attribute,    // operands[0].name
    Index,        // operands[0][operands[1]]
    Slice,        // operands[0][operands[1]:operands[2]:operands[3]] (absent parts null)
    Call,         // operands[0](operands[1..], keyword)
    Filter,       // operands[0] | name(operands[1..], keyword)
    Test,         // operands[0] is [not] name(operands[1..])
    Unary,        // name ("-", "+", "not") operands[0]
    Binary,       // operands[0] name operands[1]; name is an operator, "and", "or", "in", "not in"
    Compare,      // a < b <= c ...: operands[k] comparisons[k] operands[k+1], all true (Python's chain)
    Conditional,  // operands[0] if operands[1] else operands[2] (else part may be null)
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> operands;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  std::vector<std::string> comparisons;  // Compare
  bool negated = false;  // Test: `is not`
  int depth = 1;         // of the tree below this node, bounded so that evaluating it cannot exhaust the stack
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // if expr: body else else_body (an elif is an If alone in else_body)
    For,       // for targets in expr [if condition]: body else else_body
    Set,       // set targets[0][.attribute] = expr, or set a, b = expr (unpacked)
    SetBlock,  // set targets[0] %}body{% endset
    Macro,     // macro text(targets = defaults): body
    Break,
    Continue,
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  std::string attribute;
  std::vector<ExprPtr> defaults;  // Macro: one per parameter, null where it has none
  Body body, else_body;
};

}  // namespace tiergen::io::jinja
