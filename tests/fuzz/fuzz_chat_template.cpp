// libFuzzer target: the Jinja engine behind chat templates (src/io/jinja/): the input
// is a template, parsed and rendered over a fixed conversation as a chat request
// renders it.
// Contract: the only exception is tiergen::Error (a template's raise_exception
// included), every error names the template, and nothing a template does exhausts the
// host: output and values stay within the engine's limits, time within the fuzzer's.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "src/io/jinja/template.h"
#include "tiergen/common/error.h"

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "fuzz_chat_template: contract broken: %s %s\n", what, detail.c_str());
  std::abort();
}

using tiergen::io::jinja::Value;

tiergen::io::jinja::Dict variables() {
  auto message = [](const char* role, const char* content) {
    return Value::dict({{"role", Value::string(role)}, {"content", Value::string(content)}});
  };
  return {{"messages", Value::list({message("system", "Be terse."), message("user", " hi\n"),
                                    message("assistant", "Hello \xF0\x9F\x91\x8B"), message("user", "2+2?")})},
          {"add_generation_prompt", Value::boolean(true)},
          {"tools", Value::none()},
          {"bos_token", Value::string("<s>")},
          {"eos_token", Value::string("</s>")}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  static const tiergen::io::jinja::Dict kVariables = variables();
  try {
    const tiergen::io::jinja::Template t(source, "fuzz.jinja");
    const std::string out = t.render(kVariables);
    if (out.size() > tiergen::io::jinja::kMaxTextBytes) fail("output past the limit");
  } catch (const tiergen::io::jinja::TemplateRaised&) {
    // The template's own message: nothing to name.
  } catch (const tiergen::Error& e) {
    if (std::string(e.what()).find("fuzz.jinja") == std::string::npos) fail("error without the template's name", e.what());
  }
  return 0;
}
