// Chat templates: the LLaMA-2 and LLaMA-3 renderings equal those of a JavaScript Jinja
// engine (@huggingface/jinja, fetched with `npm pack` into $TIERGEN_NPM_CACHE, run by
// tests/chat/render_reference.mjs) for the conversations of tests/chat/; other
// templates are refused.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
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

TEST(ChatTemplate, RenderingsEqualTheJinjaReference) {
  std::string why;
  const std::string package = fetch_jinja(why);
  if (package.empty()) {
    const char* require = std::getenv("TIERGEN_REQUIRE_REFERENCE");
    if (require && std::string(require) == "1") FAIL() << why;
    GTEST_SKIP() << why;
  }
  const fs::path out = fs::temp_directory_path() / ("tiergen-chat-ref-" + std::to_string(::getpid()) + ".jsonl");
  std::string log;
  ASSERT_EQ(run("node '" + kChat + "/render_reference.mjs' '" + package + "' '" + out.string() + "'", log), 0) << log;
  std::ifstream templates_in(kChat + "/templates.json");
  const auto templates = nlohmann::json::parse(templates_in);
  const auto convs = conversations();
  std::ifstream ref(out);
  int compared = 0;
  for (std::string line; std::getline(ref, line);) {
    const auto j = nlohmann::json::parse(line);
    const std::string name = j["template"];
    const size_t i = j["conversation"];
    // Jinja in Python (what Hugging Face renders with) takes `'' != false` as true and
    // writes an empty <<SYS>> block; this JavaScript engine does not. tiergen follows
    // Python, so that one case is checked below instead.
    if (name == "llama2" && convs[i][0].role == "system" && convs[i][0].content.empty()) continue;
    const auto& t = templates[name];
    const ChatTemplate chat = ChatTemplate::from_template(t["chat_template"], t["bos_token"], t["eos_token"]);
    EXPECT_EQ(chat.render(convs[i]), j["text"].get<std::string>()) << name << " conversation " << i;
    ++compared;
  }
  fs::remove(out);
  EXPECT_EQ(compared, 11);
}

TEST(ChatTemplate, FamiliesAreRecognisedAndOthersRefused) {
  std::ifstream in(kChat + "/templates.json");
  const auto templates = nlohmann::json::parse(in);
  EXPECT_EQ(recognise_chat_template(templates["llama2"]["chat_template"]), ChatFamily::Llama2);
  EXPECT_EQ(recognise_chat_template(templates["llama3"]["chat_template"]), ChatFamily::Llama3);
  // A LLaMA-3.1 style template (tools, a dated system preamble) renders differently.
  const std::string llama31 = std::string(templates["llama3"]["chat_template"]) + "{{ 'Cutting Knowledge Date: December 2023' }}{% if tools %}{% endif %}";
  EXPECT_EQ(recognise_chat_template(llama31), ChatFamily::Unknown);
  // A variant of the stock text renders differently: an injected default system
  // prompt, roles rendered otherwise. Only the exact template is the family.
  const std::string stock = templates["llama3"]["chat_template"];
  const std::string injected = "{{ '<|start_header_id|>system<|end_header_id|>\n\nBe terse.<|eot_id|>' }}" + stock;
  EXPECT_EQ(recognise_chat_template(injected), ChatFamily::Unknown);
  std::string upper = stock;
  upper.replace(upper.find("message['role']"), 15, "message['role'] | upper");
  EXPECT_EQ(recognise_chat_template(upper), ChatFamily::Unknown);
  EXPECT_EQ(recognise_chat_template("\n" + stock + "\n"), ChatFamily::Llama3) << "surrounding whitespace is no change";
  const std::string chatml = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n'}}{% endfor %}";
  const ChatTemplate other = ChatTemplate::from_template(chatml, "<s>", "</s>", "m/tokenizer_config.json");
  try {
    other.render({{"user", "hi"}});
    FAIL() << "an unknown template must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("m/tokenizer_config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("LLaMA-2"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, Llama2RolesMustAlternateAndAnEmptySystemPromptIsKept) {
  std::ifstream in(kChat + "/templates.json");
  const auto t = nlohmann::json::parse(in)["llama2"];
  const ChatTemplate chat = ChatTemplate::from_template(t["chat_template"], "<s>", "</s>");
  EXPECT_THROW(chat.render({{"user", "a"}, {"user", "b"}}), Error);
  EXPECT_EQ(chat.render({{"system", ""}, {"user", "q"}}), "<s>[INST] <<SYS>>\n\n<</SYS>>\n\nq [/INST]");
}

}  // namespace
}  // namespace tiergen::io
