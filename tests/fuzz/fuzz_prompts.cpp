// libFuzzer target: the prompt readers (io::read_prompts: text, JSONL, OpenAI batch
// JSONL, format sniffing) and the results file scan that --resume does
// (io::ResultWriter::open with resume).
//
// The first input byte picks what is fuzzed, the rest is the file:
//   byte % 8: 0 auto-detected prompts, 1 text, 2 JSONL, 3 JSONL with a 64-byte line
//   limit, 4..5 resume scan of a results file with prompt ids "0".."N-1", 6..7 resume
//   scan without ids.
// Contract: the only exception is tiergen::Error, and a prompt error names the file
// ("fuzz.jsonl:..."); accepted prompts are numbered in order with a real line number
// and carry text (valid UTF-8) or token ids; a resume scan leaves a file that is empty
// or ends with a complete line once the work begins, and nothing before.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <spdlog/spdlog.h>

#include "tiergen/common/error.h"
#include "tiergen/io/prompts.h"
#include "tiergen/io/results.h"

namespace fs = std::filesystem;

namespace {

fs::path g_dir;

[[noreturn]] void fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "fuzz_prompts: contract broken: %s %s\n", what, detail.c_str());
  std::abort();
}

void remove_dir() {
  std::error_code ec;
  if (!g_dir.empty()) fs::remove_all(g_dir, ec);
}

void read_prompts(std::string_view file, tiergen::io::PromptFormat format, size_t max_line) {
  using namespace tiergen::io;
  const std::string name = "fuzz.prompts";
  std::istringstream in{std::string(file)};
  std::vector<PromptRecord> prompts;
  ReadOptions options;
  options.max_line_bytes = max_line;
  try {
    prompts = read_prompts(in, name, format, options);
  } catch (const tiergen::Error& e) {
    if (std::string(e.what()).rfind(name + ":", 0) != 0) fail("error does not name the file:", e.what());
    return;
  }
  if (prompts.empty()) fail("no prompts but no error");
  int64_t last_line = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& p = prompts[i];
    if (p.index != static_cast<int64_t>(i)) fail("prompt index out of order");
    if (p.line <= last_line) fail("line numbers do not increase");
    last_line = p.line;
    if (p.error) {
      // A malformed request fails on its own with a message naming its line.
      if (p.error->rfind(name + ":", 0) != 0) fail("request error does not name the file:", *p.error);
      continue;
    }
    if (p.text) {
      if (!valid_utf8(*p.text)) fail("accepted prompt text is not valid UTF-8");
    } else if (p.token_ids.empty() && !p.messages) {
      fail("prompt with neither text, token ids nor messages");
    }
    for (int64_t id : p.token_ids) {
      if (id < 0) fail("negative token id accepted");
    }
    // 0 is a request's own: it scores the prompt with "echo" (the engine refuses it otherwise).
    if (p.overrides.max_tokens && *p.overrides.max_tokens < 0) fail("max_tokens < 0 accepted");
  }
  (void)prompt_ids(prompts);
}

void scan_results(std::string_view file, bool with_ids) {
  using namespace tiergen::io;
  const fs::path path = g_dir / "results.jsonl";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(file.data(), static_cast<std::streamsize>(file.size()));
    if (!out) fail("cannot write the fuzz input file");
  }
  constexpr int64_t kPrompts = 64;
  std::vector<std::string> ids;
  if (with_ids) {
    for (int64_t i = 0; i < kPrompts; ++i) ids.push_back(std::to_string(i));
  }
  const auto contents = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  try {
    auto writer = ResultWriter::open(path.string(), kPrompts, /*resume=*/true, ids);
    if (writer.done_count() < 0 || writer.done_count() > kPrompts) fail("done_count out of range");
    if (writer.failed_before() < 0 || writer.failed_before() > writer.done_count()) fail("failed_before out of range");
    if (contents() != file) fail("opening for resume changed the file before the work began");
    writer.begin();
  } catch (const tiergen::Error&) {
    return;
  }
  const std::string kept = contents();
  if (!kept.empty() && kept.back() != '\n') fail("resume left a torn last line");
  if (file.substr(0, kept.size()) != kept) fail("resume kept bytes that were not a prefix of the file");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
  std::string pattern = (base / "tiergen-fuzz-prompts-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) fail("mkdtemp");
  g_dir = pattern;
  std::atexit(remove_dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tiergen::io::PromptFormat;
  if (size == 0) return 0;
  const std::string_view file(reinterpret_cast<const char*>(data) + 1, size - 1);
  constexpr size_t kDefaultLimit = size_t{64} << 20;
  switch (data[0] % 8) {
    case 0: read_prompts(file, PromptFormat::Auto, kDefaultLimit); break;
    case 1: read_prompts(file, PromptFormat::Text, kDefaultLimit); break;
    case 2: read_prompts(file, PromptFormat::Jsonl, kDefaultLimit); break;
    case 3: read_prompts(file, PromptFormat::Jsonl, 64); break;
    case 4:
    case 5: scan_results(file, true); break;
    default: scan_results(file, false); break;
  }
  return 0;
}
