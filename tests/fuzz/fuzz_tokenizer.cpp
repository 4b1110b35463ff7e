// libFuzzer target: loading tokenizer files (Tokenizer::load) and encoding/decoding
// with what was loaded.
//
// Input layout (parts separated by a line "=====", the first line picks the files):
//   J\n<tokenizer.json>\n=====\n<tokenizer_config.json>\n=====\n<text>
//   V\n<vocab.json>\n=====\n<merges.txt>\n=====\n<tokenizer_config.json>\n=====\n<text>
// An empty tokenizer_config.json part means no such file. The parts are written to a
// private temporary directory (under /dev/shm when there is one) that Tokenizer::load
// reads, as `tiergen generate` would a model directory.
//
// Contract: the only exception is tiergen::Error; encode() yields ids inside the
// vocabulary; encode_tail() keeps encode()'s last ids and counts them all; decode() of
// them succeeds; and StreamingDecoder's pieces concatenate to
// decode()'s text, as tokenizer.h promises.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

#include "tiergen/common/error.h"
#include "tiergen/tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace {

fs::path g_dir;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_tokenizer: contract broken: %s\n", what);
  std::abort();
}

void remove_dir() {
  std::error_code ec;
  if (!g_dir.empty()) fs::remove_all(g_dir, ec);
}

void put(const char* name, std::string_view content, bool present = true) {
  const fs::path p = g_dir / name;
  std::error_code ec;
  if (!present) {
    fs::remove(p, ec);
    return;
  }
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  if (!out) fail("cannot write the fuzz input file");
}

std::vector<std::string_view> split(std::string_view s, size_t max_parts) {
  static constexpr std::string_view kSep = "\n=====\n";
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t p = s.find(kSep);
    if (p == std::string_view::npos) break;
    parts.push_back(s.substr(0, p));
    s.remove_prefix(p + kSep.size());
  }
  parts.push_back(s);
  while (parts.size() < max_parts) parts.emplace_back();
  return parts;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
  std::string pattern = (base / "tiergen-fuzz-tokenizer-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) fail("mkdtemp");
  g_dir = pattern;
  std::atexit(remove_dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tiergen::tokenizer::StreamingDecoder;
  using tiergen::tokenizer::Tokenizer;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  if (input.size() < 2 || input[1] != '\n' || (input[0] != 'J' && input[0] != 'V')) return 0;
  const bool json_mode = input[0] == 'J';
  input.remove_prefix(2);
  std::string_view text;
  if (json_mode) {
    const auto parts = split(input, 3);
    put("tokenizer.json", parts[0]);
    put("vocab.json", "", false);
    put("merges.txt", "", false);
    put("tokenizer_config.json", parts[1], !parts[1].empty());
    text = parts[2];
  } else {
    const auto parts = split(input, 4);
    put("tokenizer.json", "", false);
    put("vocab.json", parts[0]);
    put("merges.txt", parts[1]);
    put("tokenizer_config.json", parts[2], !parts[2].empty());
    text = parts[3];
  }

  std::unique_ptr<Tokenizer> tok;
  try {
    tok = Tokenizer::load(g_dir.string());
  } catch (const tiergen::Error&) {
    return 0;
  }
  const int64_t vocab = tok->vocab_size();
  for (bool special : {true, false}) {
    std::vector<int64_t> ids;
    try {
      ids = tok->encode(text, special);
    } catch (const tiergen::Error&) {
      return 0;  // invalid UTF-8 in the text
    }
    for (int64_t id : ids) {
      if (id < 0 || id >= vocab) fail("encode() gave an id outside the vocabulary");
    }
    // encode_tail() is encode() cut to its last ids, counting all of them.
    for (const size_t keep : {size_t{0}, size_t{1}, ids.size() / 2, ids.size() - (ids.empty() ? 0 : 1), ids.size(),
                              ids.size() + 3}) {
      const tiergen::tokenizer::TokenTail tail = tok->encode_tail(text, special, keep);
      const size_t kept = std::min(keep, ids.size());
      if (tail.total != static_cast<int64_t>(ids.size())) fail("encode_tail() counted other ids than encode()");
      if (!std::equal(tail.ids.begin(), tail.ids.end(), ids.end() - static_cast<std::ptrdiff_t>(kept), ids.end()) ||
          tail.ids.size() != kept) {
        fail("encode_tail() kept other ids than encode()'s last");
      }
    }
    for (bool skip : {true, false}) {
      const std::string whole = tok->decode(ids, skip);
      StreamingDecoder stream(*tok, skip);
      std::string pieces;
      for (int64_t id : ids) pieces += stream.push(id);
      pieces += stream.flush();
      if (pieces != whole) fail("StreamingDecoder pieces differ from decode()");
    }
  }
  return 0;
}
