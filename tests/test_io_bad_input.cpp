// Prompt-reader inputs built to break error reporting rather than parsing: values
// nested deep enough to overflow a recursive printer, and values too large to quote.
// (tests/test_io_prompts.cpp covers the formats and the ordinary malformed lines.)
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "tiergen/common/error.h"
#include "tiergen/io/prompts.h"

namespace tiergen::io {
namespace {

// The first error: the read's own, or else the first request's (bad fields make a
// request fail on its own).
std::string error_of_jsonl(const std::string& text) {
  std::istringstream in(text);
  try {
    for (const auto& p : read_prompts(in, "bad.jsonl", PromptFormat::Jsonl)) {
      if (p.error) return *p.error;
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// nlohmann parses deep nesting without recursion, but dump() recurses once per level:
// an error message that quoted the value crashed with a stack overflow.
TEST(PromptReaderBadInput, DeeplyNestedValuesAreDescribedNotPrinted) {
  const std::string deep = nested(1'000'000);
  const std::pair<std::string, std::string> cases[] = {
      {R"({"prompt": "ok"})" "\n" R"({"prompt_token_ids": [1, )" + deep + "]}", "bad.jsonl:2: \"prompt_token_ids\""},
      {R"({"prompt": [7, )" + deep + "]}", "bad.jsonl:1: \"prompt\""},
      {R"({"prompt": "x", "max_tokens": )" + deep + "}", "bad.jsonl:1: \"max_tokens\" must be an integer, got an array"},
      {R"({"prompt": "x", "temperature": {"a": )" + deep + "}}", "bad.jsonl:1: \"temperature\" must be a number, got an object"},
  };
  for (const auto& [text, expect] : cases) {
    const std::string msg = error_of_jsonl(text + "\n");
    EXPECT_NE(msg.find(expect), std::string::npos) << msg.substr(0, 500);
    EXPECT_LT(msg.size(), 400u) << "the message should describe the value, not print it";
  }
}

TEST(PromptReaderBadInput, HugeValuesAreCutInMessages) {
  const std::string huge(10 << 20, 'z');
  const std::string msg = error_of_jsonl(R"({"prompt": "x", "top_k": ")" + huge + "\"}\n");
  EXPECT_NE(msg.find("bad.jsonl:1: \"top_k\""), std::string::npos) << msg.substr(0, 500);
  EXPECT_LT(msg.size(), 400u);
}

// A number past a double's range (nlohmann's out_of_range, not a parse error) is invalid
// JSON on its line like any other, not an escaped exception (a fuzzer found it crash).
TEST(PromptReaderBadInput, NumbersPastADoublesRangeAreInvalidJsonOnTheirLine) {
  for (const std::string number : {"1e999", "-29999999999999999999E9999999999999999"}) {
    const std::string msg = error_of_jsonl(R"({"prompt": "ok"})" "\n" R"({"prompt": "x", "temperature": )" + number + "}\n");
    EXPECT_NE(msg.find("bad.jsonl:2: invalid JSON"), std::string::npos) << msg;
    EXPECT_NE(msg.find("number overflow"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace tiergen::io
