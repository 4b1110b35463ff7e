// Prompt readers: every input format, and bad input named by file and line.
#include <gtest/gtest.h>

#include "tests/support/error_of.h"
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tiergen/common/error.h"
#include "tiergen/io/prompts.h"
#include "tests/support/temp_dir.h"

namespace tiergen::io {
namespace {

namespace fs = std::filesystem;

class PromptReaderTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& content) { return dir_.write(name, content); }

  test::TempDir dir_{"tiergen-io-prompts"};
};

// Runs `f`, expects a tiergen::Error, returns its message.
using test::error_of;

TEST_F(PromptReaderTest, TextOnePromptPerLine) {
  const auto path = write("p.txt", "hello world\nsecond prompt\n");
  const auto prompts = read_prompts(path);
  ASSERT_EQ(prompts.size(), 2u);
  EXPECT_EQ(prompts[0].index, 0);
  EXPECT_EQ(prompts[0].line, 1);
  EXPECT_EQ(prompts[0].id, "0");
  EXPECT_EQ(prompts[0].text, "hello world");
  EXPECT_TRUE(prompts[0].token_ids.empty());
  EXPECT_EQ(prompts[1].id, "1");
  EXPECT_EQ(prompts[1].text, "second prompt");
  EXPECT_FALSE(prompts[1].overrides.max_tokens.has_value());
}

TEST_F(PromptReaderTest, TextKeepsLeadingAndInnerSpacesVerbatim) {
  const auto prompts = read_prompts(write("p.txt", "  indented\ttab \n"));
  ASSERT_EQ(prompts.size(), 1u);
  EXPECT_EQ(prompts[0].text, "  indented\ttab ");
}

TEST_F(PromptReaderTest, TextBlankLinesAreSkippedAndLineNumbersStayRight) {
  const auto prompts = read_prompts(write("p.txt", "first\n\n   \n\t\nsecond\n\n"));
  ASSERT_EQ(prompts.size(), 2u);
  EXPECT_EQ(prompts[1].text, "second");
  EXPECT_EQ(prompts[1].index, 1);
  EXPECT_EQ(prompts[1].line, 5);
  EXPECT_EQ(prompts[1].id, "1");
}

TEST_F(PromptReaderTest, LastLineWithoutNewlineIsAPrompt) {
  const auto prompts = read_prompts(write("p.txt", "a\nb"));
  ASSERT_EQ(prompts.size(), 2u);
  EXPECT_EQ(prompts[1].text, "b");
}

TEST_F(PromptReaderTest, CrlfLineEndsAreStripped) {
  const auto text = read_prompts(write("p.txt", "one\r\ntwo\r\n\r\nthree\r\n"));
  ASSERT_EQ(text.size(), 3u);
  EXPECT_EQ(text[0].text, "one");
  EXPECT_EQ(text[2].text, "three");
  EXPECT_EQ(text[2].line, 4);
  const auto jsonl = read_prompts(write("p.jsonl", "{\"prompt\": \"x\"}\r\n{\"prompt\": \"y\"}\r\n"));
  ASSERT_EQ(jsonl.size(), 2u);
  EXPECT_EQ(jsonl[1].text, "y");
}

TEST_F(PromptReaderTest, ByteOrderMarkIsSkipped) {
  const auto text = read_prompts(write("p.txt", "\xEF\xBB\xBFhello\n"));
  ASSERT_EQ(text.size(), 1u);
  EXPECT_EQ(text[0].text, "hello");
  const auto jsonl = read_prompts(write("p.jsonl", "\xEF\xBB\xBF{\"prompt\": \"hi\"}\n"));
  ASSERT_EQ(jsonl.size(), 1u);
  EXPECT_EQ(jsonl[0].text, "hi");
}

TEST_F(PromptReaderTest, EmptyOrBlankFileHasNoPrompts) {
  const auto empty = write("empty.txt", "");
  EXPECT_NE(error_of([&] { read_prompts(empty); }).find("empty.txt: no prompts"), std::string::npos);
  const auto blank = write("blank.jsonl", "\n  \n\r\n");
  EXPECT_NE(error_of([&] { read_prompts(blank); }).find("blank.jsonl: no prompts"), std::string::npos);
}

TEST_F(PromptReaderTest, MissingFileAndDirectoryAreNamed) {
  const auto missing = dir_.file("nope.txt");
  EXPECT_NE(error_of([&] { read_prompts(missing); }).find(missing), std::string::npos);
  EXPECT_NE(error_of([&] { read_prompts(dir_.path); }).find("directory"), std::string::npos);
}

TEST_F(PromptReaderTest, TenMegabyteLineWorks) {
  const std::string big(10u << 20, 'x');
  const auto text = read_prompts(write("big.txt", "short\n" + big + "\nafter\n"));
  ASSERT_EQ(text.size(), 3u);
  EXPECT_EQ(text[1].text->size(), big.size());
  EXPECT_EQ(text[2].line, 3);
  const auto jsonl = read_prompts(write("big.jsonl", "{\"prompt\": \"" + big + "\", \"max_tokens\": 4}\n"));
  ASSERT_EQ(jsonl.size(), 1u);
  EXPECT_EQ(*jsonl[0].text, big);
  EXPECT_EQ(jsonl[0].overrides.max_tokens, 4);
}

TEST_F(PromptReaderTest, LineLongerThanTheLimitIsAnErrorNamingTheLine) {
  ReadOptions options;
  options.max_line_bytes = 100;
  const auto path = write("p.txt", "ok\n" + std::string(101, 'y') + "\n");
  const auto msg = error_of([&] { read_prompts(path, PromptFormat::Auto, options); });
  EXPECT_NE(msg.find("p.txt:2:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("longer than"), std::string::npos) << msg;
  // Exactly at the limit is fine.
  EXPECT_EQ(read_prompts(write("q.txt", std::string(100, 'y') + "\n"), PromptFormat::Auto, options).size(), 1u);
}

TEST(Utf8, ValidAndInvalidSequences) {
  size_t bad = 99;
  EXPECT_TRUE(valid_utf8("plain ascii", &bad));
  EXPECT_TRUE(valid_utf8("", &bad));
  EXPECT_TRUE(valid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", &bad));  // é € 😀
  EXPECT_TRUE(valid_utf8("\xF4\x8F\xBF\xBF", &bad));                          // U+10FFFF
  struct Case {
    std::string bytes;
    size_t offset;
  };
  const Case cases[] = {
      {"ab\xFFz", 2},            // never valid
      {"\x80", 0},               // continuation without a lead
      {"x\xC0\x80", 1},          // overlong NUL
      {"\xE0\x80\x80", 0},       // overlong 3-byte
      {"ok\xED\xA0\x80", 2},     // UTF-16 surrogate
      {"\xF4\x90\x80\x80", 0},   // past U+10FFFF
      {"abc\xE2\x82", 3},        // truncated at the end
      {"\xC3\x28", 0},           // bad continuation
      {"\xF0\x9F\x98\x28", 0},   // bad 4th byte
  };
  for (const auto& c : cases) {
    bad = 99;
    EXPECT_FALSE(valid_utf8(c.bytes, &bad)) << c.offset;
    EXPECT_EQ(bad, c.offset);
  }
  EXPECT_FALSE(valid_utf8("\xFF"));  // offset pointer is optional
}

// As Python's len(bytes.decode("utf-8", "replace")): OpenAI's and vLLM's text_offset
// count characters, not bytes.
TEST(Utf8, CharactersAreCountedAsPythonCountsThem) {
  EXPECT_EQ(count_characters(""), 0);
  EXPECT_EQ(count_characters("h\xC3\xA9llo w\xC3\xB6rld"), 11);       // héllo wörld
  EXPECT_EQ(count_characters("a\xE2\x82\xAC\xF0\x9F\x98\x80" "b"), 4);  // a€😀b
  EXPECT_EQ(count_characters("abc\xE2\x82"), 4);                      // a cut-off € is one U+FFFD
  EXPECT_EQ(count_characters("\xFF\xFE"), 2);                         // each stray byte is one
  EXPECT_EQ(count_characters("\x80x"), 2);
}

TEST_F(PromptReaderTest, InvalidUtf8InTextPromptNamesLineAndColumn) {
  const auto path = write("p.txt", "fine\nab\xFFz\n");
  const auto msg = error_of([&] { read_prompts(path); });
  EXPECT_NE(msg.find("p.txt:2:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("UTF-8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("column 3"), std::string::npos) << msg;
}

TEST_F(PromptReaderTest, JsonlPromptWithAllOverrides) {
  const auto prompts = read_prompts(write(
      "p.jsonl",
      R"({"id": "q1", "prompt": "Hello", "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "seed": 7})"
      "\n"
      R"({"prompt": "Bye", "temperature": null})"
      "\n"));
  ASSERT_EQ(prompts.size(), 2u);
  const auto& p = prompts[0];
  EXPECT_EQ(p.id, "q1");
  EXPECT_EQ(p.text, "Hello");
  EXPECT_EQ(p.overrides.max_tokens, 16);
  EXPECT_DOUBLE_EQ(*p.overrides.temperature, 0.7);
  EXPECT_DOUBLE_EQ(*p.overrides.top_p, 0.9);
  EXPECT_EQ(p.overrides.top_k, 40);
  EXPECT_EQ(p.overrides.seed, 7);
  EXPECT_EQ(prompts[1].id, "1");
  EXPECT_FALSE(prompts[1].overrides.temperature.has_value());
}

TEST_F(PromptReaderTest, JsonlTokenIds) {
  const auto prompts = read_prompts(write("p.jsonl", "{\"prompt_token_ids\": [2, 31414, 0], \"max_tokens\": 3}\n"
                                                     "{\"prompt\": [5, 6]}\n"));
  ASSERT_EQ(prompts.size(), 2u);
  EXPECT_FALSE(prompts[0].text.has_value());
  EXPECT_EQ(prompts[0].token_ids, (std::vector<int64_t>{2, 31414, 0}));
  EXPECT_EQ(prompts[0].overrides.max_tokens, 3);
  EXPECT_EQ(prompts[1].token_ids, (std::vector<int64_t>{5, 6}));
}

TEST_F(PromptReaderTest, BadTokenIdsNameTheLine) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"prompt_token_ids": [1, -2]})", "non-negative"},
      {R"({"prompt_token_ids": [1, 2.5]})", "non-negative"},
      {R"({"prompt_token_ids": ["a"]})", "non-negative"},
      {R"({"prompt_token_ids": []})", "empty"},
      {R"({"prompt_token_ids": 3})", "array"},
      {R"({"prompt_token_ids": [18446744073709551615]})", "non-negative"},
      {R"({"prompt": "x", "prompt_token_ids": [1]})", "not both"},
  };
  // Each is that request's own error; the file is still read.
  for (const auto& [line, expect] : cases) {
    const auto prompts = read_prompts(write("p.jsonl", "{\"prompt\": \"ok\"}\n" + line + "\n{\"prompt\": \"next\"}\n"));
    ASSERT_EQ(prompts.size(), 3u);
    EXPECT_FALSE(prompts[0].error.has_value());
    ASSERT_TRUE(prompts[1].error.has_value()) << line;
    const std::string msg = *prompts[1].error;
    EXPECT_NE(msg.find("p.jsonl:2:"), std::string::npos) << msg;
    EXPECT_NE(msg.find(expect), std::string::npos) << msg;
    EXPECT_EQ(prompts[2].text, "next");
  }
}

// OpenAI's and vLLM's "prompt" may list several prompts (texts, or token id arrays):
// one request, whose prompts are kept in order.
TEST_F(PromptReaderTest, APromptListIsOneRequestWithItsPromptsInOrder) {
  const auto prompts = read_prompts(write("p.jsonl",
                                          R"({"prompt": ["a", "b", "c"], "n": 2})" "\n"
                                          R"({"prompt": [[1, 2], [3]]})" "\n"
                                          R"({"prompt": ["only"]})" "\n"));
  ASSERT_EQ(prompts.size(), 3u);
  for (const auto& p : prompts) ASSERT_FALSE(p.error) << *p.error;
  EXPECT_EQ(prompts[0].text, "a");
  ASSERT_EQ(prompts[0].more_prompts.size(), 2u);
  EXPECT_EQ(prompts[0].more_prompts[0].text, "b");
  EXPECT_EQ(prompts[0].more_prompts[1].text, "c");
  EXPECT_EQ(prompts[1].token_ids, (std::vector<int64_t>{1, 2}));
  ASSERT_EQ(prompts[1].more_prompts.size(), 1u);
  EXPECT_FALSE(prompts[1].more_prompts[0].text);
  EXPECT_EQ(prompts[1].more_prompts[0].token_ids, std::vector<int64_t>{3});
  EXPECT_EQ(prompts[2].text, "only");  // a list of one is that prompt
  EXPECT_TRUE(prompts[2].more_prompts.empty());
  // A list longer than one request takes is that request's error.
  std::string many = "{\"prompt\": [";
  for (int i = 0; i < 4097; ++i) many += (i ? ", " : "") + std::string("\"x\"");
  const auto too_many = read_prompts(write("q.jsonl", many + "]}\n"));
  ASSERT_TRUE(too_many[0].error);
  EXPECT_NE(too_many[0].error->find("lists 4097 prompts; one request takes at most 4096"), std::string::npos)
      << *too_many[0].error;
}

TEST_F(PromptReaderTest, BadOverridesNameTheLineAndField) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"prompt": "x", "max_tokens": -1})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": "ten"})", "max_tokens"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {R"({"prompt": "x", "temperature": -1})", "temperature"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "top_k": -3})", "top_k"},
      {R"({"prompt": "x", "seed": 1.5})", "seed"},
      {R"({"prompt": "x", "seed": 18446744073709551615})",
       "\"seed\" is out of range: at most 2^63-1 (9223372036854775807), got 18446744073709551615"},
      {R"({"prompt": "x", "id": [1]})", "id"},
      {R"({"prompt": ""})", "empty"},
      {R"({"prompt": ["a", [1, 2]]})", "mixes strings and token id arrays (\"prompt[1]\")"},
      {R"({"prompt": ["a", ""]})", "\"prompt[1]\" is empty"},
      {R"({"prompt": [[1], []]})", "\"prompt[1]\" is empty"},
      {R"({"prompt": [[1], [2, -3]]})", "\"prompt[1]\" must hold non-negative integers; element 1"},
      {R"({"prompt": ["a", null]})", "\"prompt[1]\" must be a string or an array of token ids, not null"},
      {R"({"prompt": [[1], 7]})", "\"prompt[1]\" must be a string or an array of token ids"},
      {R"({"prompt": {"a": 1}})", "must be a string, a list of strings"},
      {R"({"text": "x"})", "no \"prompt\""},
  };
  for (const auto& [line, expect] : cases) {
    const auto prompts = read_prompts(write("p.jsonl", line + "\n"));
    ASSERT_EQ(prompts.size(), 1u);
    ASSERT_TRUE(prompts[0].error.has_value()) << line;
    const std::string msg = *prompts[0].error;
    EXPECT_NE(msg.find("p.jsonl:1:"), std::string::npos) << msg;
    EXPECT_NE(msg.find(expect), std::string::npos) << msg;
  }
}

TEST_F(PromptReaderTest, EveryRequestFieldIsRead) {
  const auto prompts = read_prompts(write(
      "p.jsonl",
      R"({"prompt": "x", "min_tokens": 2, "n": 3, "stop": ["a", "bc"], "stop_token_ids": [7], "ignore_eos": true, "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.3, "logprobs": 4, "echo": false, "user": "u", "stream": false, "top_k": -1})"
      "\n"
      R"({"prompt": "y", "stop": "only"})"
      "\n"));
  ASSERT_EQ(prompts.size(), 2u);
  ASSERT_FALSE(prompts[0].error) << *prompts[0].error;
  const auto& o = prompts[0].overrides;
  EXPECT_EQ(o.min_tokens, 2);
  EXPECT_EQ(o.n, 3);
  EXPECT_EQ(*o.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(*o.stop_token_ids, std::vector<int64_t>{7});
  EXPECT_EQ(o.ignore_eos, true);
  EXPECT_DOUBLE_EQ(*o.presence_penalty, 0.5);
  EXPECT_DOUBLE_EQ(*o.frequency_penalty, -0.5);
  EXPECT_DOUBLE_EQ(*o.repetition_penalty, 1.3);
  EXPECT_EQ(o.logprobs, 4);
  EXPECT_EQ(o.echo, false);
  EXPECT_EQ(o.top_k, 0);  // vLLM's -1 is "off"
  EXPECT_EQ(*prompts[1].overrides.stop, std::vector<std::string>{"only"});
}

TEST_F(PromptReaderTest, InvalidJsonNamesLineAndParserMessage) {
  const auto path = write("p.jsonl", "{\"prompt\": \"a\"}\n\n{\"prompt\": oops}\n");
  const auto msg = error_of([&] { read_prompts(path); });
  EXPECT_NE(msg.find("p.jsonl:3:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("invalid JSON"), std::string::npos) << msg;
  EXPECT_NE(msg.find("column"), std::string::npos) << msg;  // the parser's own message
  EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
}

TEST_F(PromptReaderTest, InvalidJsonInAHugeLineGivesAShortMessage) {
  const std::string big(1u << 20, 'x');
  const auto path = write("p.jsonl", "{\"prompt\": \"" + big + "\\u12\"}\n");
  const auto msg = error_of([&] { read_prompts(path); });
  EXPECT_NE(msg.find("p.jsonl:1: invalid JSON"), std::string::npos) << msg.substr(0, 200);
  EXPECT_LT(msg.size(), 1000u);
}

TEST_F(PromptReaderTest, PrettyPrintedJsonGetsAHint) {
  const auto path = write("p.json", "{\n  \"prompt\": \"a\"\n}\n");
  const auto msg = error_of([&] { read_prompts(path); });
  EXPECT_NE(msg.find("p.json:1:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("one complete JSON object per line"), std::string::npos) << msg;
}

TEST_F(PromptReaderTest, NonObjectLineIsAnError) {
  const auto msg = error_of([&] { read_prompts(write("p.jsonl", "\"just a string\"\n")); });
  EXPECT_NE(msg.find("p.jsonl:1:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected a JSON object"), std::string::npos) << msg;
}

TEST_F(PromptReaderTest, DeeplyNestedJsonIsAnErrorNotACrash) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const auto msg = error_of([&] { read_prompts(write("p.jsonl", deep + "\n")); });
  EXPECT_NE(msg.find("p.jsonl:1:"), std::string::npos) << msg;
}

TEST_F(PromptReaderTest, OpenAiBatchRequests) {
  const auto prompts = read_prompts(write(
      "batch.jsonl",
      R"({"custom_id": "request-1", "method": "POST", "url": "/v1/completions", "body": {"model": "opt-30b", "prompt": "Once upon", "max_tokens": 32, "temperature": 0.5, "top_p": 0.95, "seed": 3}})"
      "\n"
      R"({"custom_id": "request-2", "method": "POST", "url": "/v1/completions", "body": {"model": "opt-30b", "prompt": [1, 2, 3]}})"
      "\n"));
  ASSERT_EQ(prompts.size(), 2u);
  EXPECT_EQ(prompts[0].id, "request-1");
  EXPECT_EQ(prompts[0].text, "Once upon");
  EXPECT_EQ(prompts[0].overrides.max_tokens, 32);
  EXPECT_DOUBLE_EQ(*prompts[0].overrides.temperature, 0.5);
  EXPECT_DOUBLE_EQ(*prompts[0].overrides.top_p, 0.95);
  EXPECT_EQ(prompts[0].overrides.seed, 3);
  EXPECT_EQ(prompts[1].id, "request-2");
  EXPECT_EQ(prompts[1].token_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(prompts[1].line, 2);
}

TEST_F(PromptReaderTest, OpenAiChatRequestsAreReadAndBadRequestsAreRequestErrors) {
  const auto prompts = read_prompts(write(
      "chat.jsonl",
      R"({"custom_id": "a", "url": "/v1/completions", "body": {"prompt": "x"}})"
      "\n"
      R"({"custom_id": "b", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}})"
      "\n"
      R"({"custom_id": "c", "url": "/v1/embeddings", "body": {"prompt": "x"}})"
      "\n"
      R"({"custom_id": "d"})"
      "\n"
      R"({"custom_id": "e", "url": "/v1/completions", "body": {"messages": [{"role": "user", "content": "hi"}]}})"
      "\n"
      R"({"custom_id": "f", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user"}]}})"
      "\n"));
  ASSERT_EQ(prompts.size(), 6u);
  EXPECT_FALSE(prompts[0].error);
  ASSERT_FALSE(prompts[1].error) << *prompts[1].error;
  ASSERT_TRUE(prompts[1].messages.has_value());
  ASSERT_EQ(prompts[1].messages->size(), 2u);
  EXPECT_EQ((*prompts[1].messages)[0].role, "system");
  EXPECT_EQ((*prompts[1].messages)[1].content, "hi");
  EXPECT_EQ(prompts[1].model, "m");
  EXPECT_EQ(prompts[1].custom_id, "b");
  const std::pair<size_t, std::string> errors[] = {
      {2, "/v1/embeddings"}, {3, "body"}, {4, "/v1/chat/completions"}, {5, "messages"}};
  for (const auto& [i, expect] : errors) {
    ASSERT_TRUE(prompts[i].error.has_value()) << i;
    EXPECT_NE(prompts[i].error->find("chat.jsonl:" + std::to_string(i + 1) + ":"), std::string::npos) << *prompts[i].error;
    EXPECT_NE(prompts[i].error->find(expect), std::string::npos) << *prompts[i].error;
    EXPECT_TRUE(prompts[i].openai);
    EXPECT_EQ(prompts[i].custom_id, std::string(1, static_cast<char>('a' + i)));  // named in its error line
  }
}

// What a batch file written for vLLM sends: sampling fields tiergen implements, fields
// whose value changes nothing (accepted with that value only), text content parts.
TEST_F(PromptReaderTest, VllmBatchFieldsAreReadAndNoOpFieldsAcceptedOnlyWhereTheyChangeNothing) {
  const auto prompts = read_prompts(write(
      "vllm.jsonl",
      R"({"custom_id": "a", "url": "/v1/completions", "body": {"prompt": "x", "min_p": 0.1, "include_stop_str_in_output": true, "skip_special_tokens": false, "best_of": 1, "suffix": null, "stream_options": null, "logit_bias": {}, "response_format": {"type": "text"}}})"
      "\n"
      R"({"custom_id": "b", "url": "/v1/chat/completions", "body": {"n": 2, "best_of": 2, "stream": false, "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}]}})"
      "\n"
      R"({"prompt": "x", "best_of": 3})"
      "\n"
      R"({"prompt": "x", "suffix": "tail"})"
      "\n"
      R"({"prompt": "x", "logit_bias": {"50256": -100}})"
      "\n"
      R"({"prompt": "x", "response_format": {"type": "json_object"}})"
      "\n"
      R"({"prompt": "x", "min_p": 1.5})"
      "\n"
      R"({"custom_id": "h", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}})"
      "\n"
      R"({"custom_id": "i", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": [{"type": "text"}]}]}})"
      "\n"));
  ASSERT_EQ(prompts.size(), 9u);
  ASSERT_FALSE(prompts[0].error) << *prompts[0].error;
  const auto& o = prompts[0].overrides;
  EXPECT_DOUBLE_EQ(*o.min_p, 0.1);
  EXPECT_EQ(o.include_stop_str_in_output, true);
  EXPECT_EQ(o.skip_special_tokens, false);
  ASSERT_FALSE(prompts[1].error) << *prompts[1].error;
  ASSERT_TRUE(prompts[1].messages);
  EXPECT_EQ((*prompts[1].messages)[0].content, "one\ntwo");  // joined as vLLM joins text parts
  EXPECT_EQ(prompts[1].best_of, 2);
  ASSERT_FALSE(prompts[2].error) << *prompts[2].error;  // checked against n with the job's defaults
  EXPECT_EQ(prompts[2].best_of, 3);
  const std::pair<size_t, std::string> errors[] = {{3, "\"suffix\""},
                                                   {4, "\"logit_bias\""},      {5, "json_object"},
                                                   {6, "min_p"},                {7, "\"image_url\""},
                                                   {8, "content part 0 must be"}};
  for (const auto& [i, expect] : errors) {
    ASSERT_TRUE(prompts[i].error.has_value()) << i;
    EXPECT_NE(prompts[i].error->find("vllm.jsonl:" + std::to_string(i + 1) + ":"), std::string::npos)
        << *prompts[i].error;
    EXPECT_NE(prompts[i].error->find(expect), std::string::npos) << *prompts[i].error;
  }
}

TEST_F(PromptReaderTest, KindsMayBeMixedPerLine) {
  const auto prompts = read_prompts(write(
      "mixed.jsonl", "{\"prompt\": \"text\"}\n{\"prompt_token_ids\": [9]}\n"
                     R"({"custom_id": "c", "body": {"prompt": "batch"}})"
                     "\n"));
  ASSERT_EQ(prompts.size(), 3u);
  EXPECT_EQ(prompts[0].text, "text");
  EXPECT_EQ(prompts[1].token_ids, std::vector<int64_t>{9});
  EXPECT_EQ(prompts[2].text, "batch");
  EXPECT_EQ(prompts[2].id, "c");
}

TEST_F(PromptReaderTest, IdPrecedenceIsIdThenCustomIdThenIndex) {
  const auto prompts = read_prompts(write(
      "ids.jsonl", R"({"id": "own", "custom_id": "cid", "body": {"prompt": "a"}})"
                   "\n"
                   R"({"custom_id": "cid2", "body": {"prompt": "b"}})"
                   "\n"
                   R"({"prompt": "c", "id": 42})"
                   "\n"
                   R"({"prompt": "d"})"
                   "\n"));
  ASSERT_EQ(prompts.size(), 4u);
  EXPECT_EQ(prompts[0].id, "own");
  EXPECT_EQ(prompts[1].id, "cid2");
  EXPECT_EQ(prompts[2].id, "42");
  EXPECT_EQ(prompts[3].id, "3");
  EXPECT_EQ(prompt_ids(prompts), (std::vector<std::string>{"own", "cid2", "42", "3"}));
}

TEST_F(PromptReaderTest, UnknownFieldsAreRequestErrorsNamingTheField) {
  const auto prompts = read_prompts(write(
      "p.jsonl", R"({"prompt": "a", "foo": 1})"
                 "\n"
                 R"({"custom_id": "z", "body": {"prompt": "b", "suffix": "s", "model": "m"}})"
                 "\n"
                 R"({"prompt": "c", "stream": true})"
                 "\n"));
  ASSERT_EQ(prompts.size(), 3u);
  ASSERT_TRUE(prompts[0].error && prompts[1].error && prompts[2].error);
  EXPECT_NE(prompts[0].error->find("\"foo\""), std::string::npos) << *prompts[0].error;
  EXPECT_NE(prompts[1].error->find("\"suffix\""), std::string::npos) << *prompts[1].error;
  EXPECT_NE(prompts[2].error->find("stream"), std::string::npos) << *prompts[2].error;
}

TEST_F(PromptReaderTest, TextFormatOnStdinStartingWithABraceIsText) {
  std::istringstream in("{not json} is my prompt\nsecond\n");
  const auto prompts = read_prompts(in, "<stdin>", PromptFormat::Text);
  ASSERT_EQ(prompts.size(), 2u);
  EXPECT_EQ(prompts[0].text, "{not json} is my prompt");
  // Sniffed as JSONL, the error says how to read it as text.
  std::istringstream sniffed("{not json} is my prompt\n");
  const auto msg = error_of([&] { read_prompts(sniffed, "<stdin>"); });
  EXPECT_NE(msg.find("--format text"), std::string::npos) << msg;
}

TEST_F(PromptReaderTest, FormatByExtensionWithOverride) {
  EXPECT_EQ(format_from_extension("a/b.txt"), PromptFormat::Text);
  EXPECT_EQ(format_from_extension("b.JSONL"), PromptFormat::Jsonl);
  EXPECT_EQ(format_from_extension("b.json"), PromptFormat::Jsonl);
  EXPECT_EQ(format_from_extension("prompts"), PromptFormat::Auto);
  EXPECT_EQ(parse_prompt_format("JSONL"), PromptFormat::Jsonl);
  EXPECT_EQ(parse_prompt_format("txt"), PromptFormat::Text);
  EXPECT_EQ(parse_prompt_format("auto"), PromptFormat::Auto);
  EXPECT_NE(error_of([] { parse_prompt_format("csv"); }).find("csv"), std::string::npos);

  // A .txt file holding JSON is text unless told otherwise.
  const auto txt = write("j.txt", "{\"prompt\": \"x\"}\n");
  EXPECT_EQ(read_prompts(txt)[0].text, "{\"prompt\": \"x\"}");
  EXPECT_EQ(read_prompts(txt, PromptFormat::Jsonl)[0].text, "x");
  const auto jsonl = write("t.jsonl", "not json\n");
  EXPECT_EQ(read_prompts(jsonl, PromptFormat::Text)[0].text, "not json");
}

TEST(PromptStream, UnknownExtensionIsSniffed) {
  std::istringstream json_in("\n{\"prompt\": \"x\"}\n");
  const auto a = read_prompts(json_in, "<stdin>");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].text, "x");
  EXPECT_EQ(a[0].line, 2);
  std::istringstream text_in("plain words\n{not first}\n");
  const auto b = read_prompts(text_in, "prompts");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1].text, "{not first}");
}

}  // namespace
}  // namespace tiergen::io
