// Chat templates: real models' templates (tests/chat/templates.json, each with its
// source) render the conversations of tests/chat/ exactly as Python's jinja2 under
// Hugging Face's settings (tests/chat/render_reference.py) and as a JavaScript Jinja
// engine (@huggingface/jinja, fetched with `npm pack` into $TIERGEN_NPM_CACHE, run by
// tests/chat/render_reference.mjs) render them; a template that refuses a conversation
// (raise_exception) fails that request with the template's message.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <functional>
#include <sstream>

#include "src/io/chat_template.h"
#include "tiergen/common/error.h"
#include "tests/support/temp_dir.h"

namespace tiergen::io {
namespace {

namespace fs = std::filesystem;

const std::string kChat = std::string(TIERGEN_SOURCE_DIR) + "/tests/chat";
constexpr const char* kPackage = "@huggingface/jinja";
constexpr const char* kVersion = "0.5.11";  // pinned: the reference is what this version renders

int run(const std::string& command, std::string& output) {
  output.clear();
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe)) output += buffer;
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string cache_dir() {
  if (const char* env = std::getenv("TIERGEN_NPM_CACHE"); env && *env) return env;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/tiergen-npm";
}

// The package directory, or "" with `why` set.
std::string fetch_jinja(std::string& why) {
  std::string out;
  if (run("command -v node && command -v npm", out) != 0) {
    why = "node and npm are needed for the chat template reference test";
    return "";
  }
  const fs::path dest = fs::path(cache_dir()) / "node_modules" / kPackage;
  std::ifstream manifest(dest / "package.json");
  if (manifest && nlohmann::json::parse(manifest, nullptr, false).value("version", "") == kVersion) return dest.string();
  const fs::path work = fs::path(cache_dir()) / ("jinja-" + std::to_string(::getpid()));
  fs::create_directories(work);
  const std::string spec = std::string(kPackage) + "@" + kVersion;
  if (run("cd '" + work.string() + "' && npm pack --silent " + spec + " && tar xzf *.tgz", out) != 0) {
    why = "cannot fetch " + spec + " from the npm registry: " + out;
    return "";
  }
  tiergen::test::remove_tree(dest);
  fs::create_directories(dest.parent_path());
  fs::rename(work / "package", dest);
  tiergen::test::remove_tree(work);
  return dest.string();
}

std::vector<std::vector<ChatMessage>> conversations() {
  std::ifstream in(kChat + "/conversations.jsonl");
  std::vector<std::vector<ChatMessage>> all;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::vector<ChatMessage> messages;
    for (const auto& m : nlohmann::json::parse(line)) messages.push_back({m["role"], m["content"]});
    all.push_back(std::move(messages));
  }
  return all;
}

nlohmann::json templates() {
  std::ifstream in(kChat + "/templates.json");
  return nlohmann::json::parse(in);
}

ChatTemplate chat_template(const nlohmann::json& t, const std::string& where = "chat_template") {
  return ChatTemplate::from_template(t["chat_template"], {{"bos_token", t["bos_token"]}, {"eos_token", t["eos_token"]}},
                                     where);
}

// The reference's lines, written by `command` into a temporary file.
std::vector<nlohmann::json> reference_lines(const std::string& command_before_out) {
  const fs::path out = fs::temp_directory_path() / ("tiergen-chat-ref-" + std::to_string(::getpid()) + ".jsonl");
  std::string log;
  EXPECT_EQ(run(command_before_out + " '" + out.string() + "'", log), 0) << log;
  std::vector<nlohmann::json> lines;
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  fs::remove(out);
  return lines;
}

// Renders every (template, conversation) of the reference and compares: equal text, or
// a refusal where the reference raised (with its message). `skip` leaves out known
// differences of the reference from Python's jinja2. Returns the number compared.
int compare_with_reference(const std::vector<nlohmann::json>& reference,
                           const std::function<bool(const std::string&, const std::vector<ChatMessage>&)>& skip) {
  const auto all = templates();
  const auto convs = conversations();
  int compared = 0;
  for (const auto& j : reference) {
    const std::string name = j["template"];
    const size_t i = j["conversation"];
    if (skip && skip(name, convs[i])) continue;
    const ChatTemplate chat = chat_template(all[name]);
    ++compared;
    if (j.contains("error")) {
      try {
        chat.render(convs[i]);
        ADD_FAILURE() << name << " conversation " << i << " must be refused: " << j["error"];
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(j["error"].get<std::string>()), std::string::npos)
            << name << " conversation " << i << ": " << e.what();
      }
      continue;
    }
    try {
      EXPECT_EQ(chat.render(convs[i]), j["text"].get<std::string>()) << name << " conversation " << i;
    } catch (const Error& e) {
      ADD_FAILURE() << name << " conversation " << i << ": " << e.what();
    }
  }
  return compared;
}

size_t all_pairs() { return templates().size() * conversations().size(); }

TEST(ChatTemplate, RealTemplatesRenderAsPythonJinjaRendersThem) {
  std::string out;
  if (run("python3 -c 'import jinja2'", out) != 0) {
    const char* require = std::getenv("TIERGEN_REQUIRE_REFERENCE");
    if (require && std::string(require) == "1") FAIL() << "python3 with jinja2 is needed: " << out;
    GTEST_SKIP() << "python3 with jinja2 (Debian: python3-jinja2) is needed for this reference";
  }
  ASSERT_GE(templates().size(), 14u) << "at least 12 real templates besides the plain one";
  const int compared = compare_with_reference(reference_lines("python3 '" + kChat + "/render_reference.py'"), nullptr);
  EXPECT_EQ(static_cast<size_t>(compared), all_pairs());
}

TEST(ChatTemplate, RealTemplatesRenderAsTheJavaScriptJinjaEngineRendersThem) {
  std::string why;
  const std::string package = fetch_jinja(why);
  if (package.empty()) {
    const char* require = std::getenv("TIERGEN_REQUIRE_REFERENCE");
    if (require && std::string(require) == "1") FAIL() << why;
    GTEST_SKIP() << why;
  }
  // Python (what Hugging Face renders with) takes `'' != false` as true and writes an
  // empty system block; this JavaScript engine does not. tiergen follows Python, so
  // the templates that compare the system message with false are left out on a
  // conversation with an empty system message (the Python reference checks them).
  const auto compares_with_false = [](const std::string& name, const std::vector<ChatMessage>& conv) {
    const std::string source = templates()[name]["chat_template"];
    return source.find("!= false") != std::string::npos && conv[0].role == "system" && conv[0].content.empty();
  };
  const int compared = compare_with_reference(
      reference_lines("node '" + kChat + "/render_reference.mjs' '" + package + "'"), compares_with_false);
  EXPECT_EQ(static_cast<size_t>(compared), all_pairs() - 2);
}

TEST(ChatTemplate, AModifiedTemplateRendersAsWritten) {
  // A fine-tune's variant of a stock template (an injected system prompt, roles written
  // otherwise) renders what it says, not what the stock template would.
  const auto t = templates()["llama3"];
  const std::string stock = t["chat_template"];
  std::string upper = stock;
  upper.replace(upper.find("message['role']"), 15, "message['role'] | upper");
  const std::string injected = "{{ '<|start_header_id|>system<|end_header_id|>\n\nBe terse.<|eot_id|>' }}" + upper;
  const ChatTemplate chat = ChatTemplate::from_template(injected, {{"bos_token", "<B>"}});
  EXPECT_EQ(chat.render({{"user", " hi "}}),
            "<|start_header_id|>system<|end_header_id|>\n\nBe terse.<|eot_id|><B><|start_header_id|>USER<|end_header_id|>"
            "\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, RefusalsAndBrokenTemplatesNameTheTemplate) {
  const auto all = templates();
  const ChatTemplate llama2 = chat_template(all["llama2"], "m/tokenizer_config.json \"chat_template\"");
  try {
    llama2.render({{"user", "a"}, {"user", "b"}});
    FAIL() << "roles that do not alternate are refused by the template";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("m/tokenizer_config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Conversation roles must alternate"), std::string::npos) << e.what();
  }
  // An empty system prompt is kept (Python's '' != false).
  EXPECT_EQ(llama2.render({{"system", ""}, {"user", "q"}}), "<s>[INST] <<SYS>>\n\n<</SYS>>\n\nq [/INST]");

  const ChatTemplate broken = ChatTemplate::from_template("{% for m in messages %}\n{{ m.content }", {}, "m/tc.json");
  try {
    broken.render({{"user", "hi"}});
    FAIL() << "a template that does not parse cannot render";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("m/tc.json line 2"), std::string::npos) << e.what();
  }
  const ChatTemplate none;
  EXPECT_FALSE(none.present());
  EXPECT_THROW(none.render({{"user", "hi"}}), Error);
}

TEST(ChatTemplate, AChatTemplateFileReplacesTheConfigs) {
  tiergen::test::TempDir dir("chat-template-file");
  dir.write("tokenizer_config.json",
            R"({"chat_template": "{{ 'config' }}", "bos_token": "<s>", "eos_token": {"content": "</s>"}})");
  const std::string file = dir.write("t.jinja", "{% for m in messages %}[{{ m.role }}|{{ m.content }}]{% endfor %}"
                                                "{{ bos_token }}{{ eos_token }}\n");
  const std::string bad = dir.write("bad.jinja", "{{ messages }}\n{% if %}");
  const auto tok = tokenizer::Tokenizer::load(std::string(TIERGEN_TEST_FIXTURES) + "/tokenizers/byte_level");
  EXPECT_EQ(ChatTemplate::load(dir.path, *tok).render({{"user", "x"}}), "config");
  EXPECT_EQ(ChatTemplate::load(dir.path, *tok, file).render({{"user", "x"}, {"assistant", "y"}}),
            "[user|x][assistant|y]<s></s>");
  try {
    ChatTemplate::load(dir.path, *tok, bad);
    FAIL() << "a --chat-template file that does not parse is refused at once";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--chat-template " + bad + " line 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ChatTemplate::load(dir.path, *tok, dir.file("missing.jinja")), Error);
}

}  // namespace
}  // namespace tiergen::io
