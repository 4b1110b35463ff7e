#pragma once
// What a template can call: Jinja's filters (`x | trim`) and tests (`x is defined`),
// the Python methods of strings and dicts that templates use (`s.strip()`,
// `d.items()`), and the globals Hugging Face provides (raise_exception, range,
// namespace, dict, strftime_now). Each follows jinja2 3.x / Python; what is missing
// fails with a message naming it rather than rendering something else.
#include <string>

#include "src/io/jinja/value.h"
#include "tiergen/common/error.h"

namespace tiergen::io::jinja {

// raise_exception(message) in a template: the template refused what it was given.
class TemplateRaised : public tiergen::Error {
 public:
  using Error::Error;
};

Value apply_filter(const std::string& name, const Value& value, const CallArgs& args);
bool apply_test(const std::string& name, const Value& value, const CallArgs& args);
// `object.name` as a bound method (strings: strip, split, startswith, ...; dicts: items,
// keys, values, get), or Undefined when it has none of that name.
Value member_function(const Value& object, const std::string& name);
// A global function by name, or Undefined.
Value global_function(const std::string& name);

// Python's len() of a string (code points), list or dict.
int64_t length_of(const Value& v);
// The items a `for` loop visits: a list's items, a dict's keys, a string's characters;
// nothing for Undefined. Throws for anything else.
List iterate(const Value& v);

}  // namespace tiergen::io::jinja
