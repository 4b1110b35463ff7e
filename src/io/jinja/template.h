#pragma once
// A Jinja template as Hugging Face renders chat templates: jinja2's syntax and
// semantics (trim_blocks, lstrip_blocks, loop controls, Python's values), the subset
// that models' tokenizer_config.json templates use. Parsing happens once, when the
// template is made; render() may run many times.
//
//   jinja::Template t(source, "DIR/tokenizer_config.json \"chat_template\"");
//   std::string prompt = t.render({{"messages", ...}, {"add_generation_prompt", ...}});
//
// Errors are tiergen::Error naming `where` and the template line; a template's own
// raise_exception(...) is a jinja::TemplateRaised carrying just its message.
//
// Known differences from jinja2, none of which the chat templates tested use: tuples are
// lists (they print as [1, 2]); integers are 64-bit (overflow is an error); case
// mapping covers Latin, Greek and Cyrillic letters; dict keys are strings. Missing
// features fail with an error naming them, never render something else: the filters
// format, center, truncate, batch, slice; {% filter %}, {% with %}, {% call %},
// {% include %}; str.format; loop.changed and loop.depth; macro varargs and kwargs.
#include <memory>
#include <string>

#include "src/io/jinja/ast.h"
#include "src/io/jinja/builtins.h"
#include "src/io/jinja/value.h"

namespace tiergen::io::jinja {

class Template {
 public:
  Template(const std::string& source, std::string where);

  std::string render(const Dict& variables) const;

 private:
  std::string where_;
  std::shared_ptr<const Body> body_;
};

}  // namespace tiergen::io::jinja
