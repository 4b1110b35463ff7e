#pragma once
// Tokens -> statements, with Jinja's grammar and operator precedence (lowest first):
// `a if c else b`, or, and, not, comparisons and `in`, + -, ~, * / // %, **, unary - +,
// then postfix `.x` `[i]` `[a:b]` `(args)`, filters `|f(args)` and tests `is [not] t`.
// Tags: if/elif/else, for (with `if` filter and else), set (name, ns.attr, block),
// macro, break, continue, raw, and Hugging Face's generation block (rendered as its body).
#include <string>
#include <vector>

#include "src/io/jinja/ast.h"
#include "src/io/jinja/lexer.h"

namespace tiergen::io::jinja {

// Throws tiergen::Error naming `where` and the line of the first syntax error.
Body parse(const std::vector<Token>& tokens, const std::string& where);

}  // namespace tiergen::io::jinja
