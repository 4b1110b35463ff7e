// Tokenizer throughput: encodes a text file line by line, as the node reference does
// in tests/tokenizer/reference.mjs (bench mode), and prints one JSON line with MB/s
// (median over repeats). Run both through bench/tokenizer_bench.sh.
//
//   bench_tokenizer <tokenizer_dir> <text_file> [repeats] [kind]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tiergen/common/error.h"
#include "tiergen/tokenizer/tokenizer.h"

namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t nl = text.find('\n'); nl != std::string::npos; nl = text.find('\n', start)) {
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  lines.push_back(text.substr(start));
  return lines;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <tokenizer_dir> <text_file> [repeats] [kind]\n", argv[0]);
    return 2;
  }
  try {
    const std::string dir = argv[1];
    const int repeats = argc > 3 ? std::max(1, std::atoi(argv[3])) : 3;
    const std::string kind = argc > 4 ? argv[4] : dir;
    std::ifstream in(argv[2], std::ios::binary);
    TG_CHECK(in.good(), "{}: cannot open", argv[2]);
    std::ostringstream buffer;
    buffer << in.rdbuf();
    const std::string text = buffer.str();
    const std::vector<std::string> lines = split_lines(text);

    const auto load_start = std::chrono::steady_clock::now();
    const auto tok = tiergen::tokenizer::Tokenizer::load(dir);
    const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();

    std::vector<double> times;
    std::size_t tokens = 0;
    for (int r = 0; r < repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      tokens = 0;
      for (const auto& line : lines) tokens += tok->encode(line, false).size();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    std::printf(
        "{\"impl\": \"tiergen\", \"kind\": \"%s\", \"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.4f, "
        "\"mb_per_s\": %.3f, \"load_seconds\": %.3f}\n",
        kind.c_str(), text.size(), tokens, median, text.size() / 1e6 / median, load_seconds);
    return 0;
  } catch (const tiergen::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
