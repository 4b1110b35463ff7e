#pragma once
// Template text -> tokens, with the whitespace rules Hugging Face renders chat templates
// under: trim_blocks (the newline after a block or comment tag is dropped; `+%}` keeps
// it), lstrip_blocks (whitespace before a block or comment tag on its own line is
// dropped; `{%+` keeps it), `{%-`/`-%}` (and the same on `{{ }}` and `{# #}`)
// stripping all whitespace on that side, newlines read as \n (\r\n and \r too), and
// one trailing newline of the template dropped. Comments produce no tokens;
// `{% raw %}...{% endraw %}` is one text token.
#include <string>
#include <vector>

namespace tiergen::io::jinja {

struct Token {
  enum class Type {
    Text,        // literal template text (already whitespace-controlled)
    VarBegin,    // {{
    VarEnd,      // }}
    BlockBegin,  // {%
    BlockEnd,    // %}
    Name,
    String,      // text holds the unescaped value
    Integer,
    Float,
    Operator,    // + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
    End,
  };
  Type type;
  std::string text;
  int line;  // 1-based line of the template the token starts on
};

// Throws tiergen::Error naming `where` and the line for an unclosed tag, comment or
// string, or a character no expression can hold.
std::vector<Token> tokenize(const std::string& source, const std::string& where);

}  // namespace tiergen::io::jinja
