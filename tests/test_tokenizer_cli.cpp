// `tiergen tokenize` end to end: JSON strings in, id arrays out, and back.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/temp_dir.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int status;
  std::string out;  // stdout only
  std::string err;
};

// Runs `tiergen tokenize <args>` with `input` on stdin.
Result tokenize(const std::string& args, const std::string& input) {
  const fs::path dir = fs::temp_directory_path() / ("tiergen-cli-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "in") << input;
  const std::string command = std::string(TIERGEN_BINARY_DIR) + "/tiergen tokenize " + args + " < " +
                              (dir / "in").string() + " > " + (dir / "out").string() + " 2> " + (dir / "err").string();
  const int status = std::system(command.c_str());
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  Result r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir / "out"), slurp(dir / "err")};
  tiergen::test::remove_tree(dir);
  return r;
}

const std::string kSentencePiece = std::string(TIERGEN_TEST_FIXTURES) + "/tokenizers/sentencepiece";

TEST(TokenizeCommand, EncodesAndDecodesLineByLine) {
  const Result enc = tokenize("--tokenizer " + kSentencePiece, "\"Hello world\"\n\"中\"\n\"\"\n");
  ASSERT_EQ(enc.status, 0) << enc.err;
  EXPECT_EQ(enc.out, "[1,259,298,305]\n[1,259,231,187,176]\n[1]\n");

  const Result plain = tokenize("--tokenizer " + kSentencePiece + " --no-special", "\"Hello world\"\n");
  EXPECT_EQ(plain.out, "[259,298,305]\n");

  const Result dec = tokenize("--tokenizer " + kSentencePiece + " --decode", "[1,259,298,305]\n[1,259,231,187,176]\n");
  ASSERT_EQ(dec.status, 0) << dec.err;
  EXPECT_EQ(dec.out, "\"Hello world\"\n\"中\"\n");

  const Result raw = tokenize("--tokenizer " + kSentencePiece + " --decode --no-special", "[1,259,298]\n");
  EXPECT_EQ(raw.out, "\"<s> Hello\"\n");
}

// Raw text on the command line (-p/--text, repeatable) and a model directory with -m.
TEST(TokenizeCommand, TakesRawTextAndAModelDirectory) {
  const Result enc = tokenize("-m " + kSentencePiece + " -p 'Hello world' --text '中'", "");
  ASSERT_EQ(enc.status, 0) << enc.err;
  EXPECT_EQ(enc.out, "[1,259,298,305]\n[1,259,231,187,176]\n") << "the same ids as the JSON lines give";
  const Result dec = tokenize("--tokenizer " + kSentencePiece + " --decode -p '1 259 298 305' -p '[1, 259, 231, 187, 176]'", "");
  ASSERT_EQ(dec.status, 0) << dec.err;
  EXPECT_EQ(dec.out, "\"Hello world\"\n\"中\"\n");
  const Result bad = tokenize("--tokenizer " + kSentencePiece + " --decode -p '1 x'", "");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("--text 1: 'x' is not a token id"), std::string::npos) << bad.err;
  const Result neither = tokenize("-p hi", "");
  EXPECT_NE(neither.status, 0);
  EXPECT_NE(neither.err.find("needs --tokenizer DIR or -m MODEL_DIR"), std::string::npos) << neither.err;
}

TEST(TokenizeCommand, MalformedLinesNameTheLine) {
  Result r = tokenize("--tokenizer " + kSentencePiece, "\"ok\"\nnot json\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "[1,259,274,270]\n");  // "▁", "o", "k": no merges apply
  EXPECT_NE(r.err.find("stdin line 2"), std::string::npos) << r.err;

  r = tokenize("--tokenizer " + kSentencePiece, "[1, 2]\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("stdin line 1: expected a JSON string"), std::string::npos) << r.err;

  r = tokenize("--tokenizer " + kSentencePiece + " --decode", "[1]\n[-1]\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("stdin line 2"), std::string::npos) << r.err;
  // An id past the tokenizer's vocabulary (a model's may be larger) decodes to
  // nothing, as in Hugging Face.
  r = tokenize("--tokenizer " + kSentencePiece + " --decode", "[99999]\n");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "\"\"\n");

  r = tokenize("--tokenizer " + kSentencePiece, "\"\xFF\"\n");  // invalid UTF-8 inside the JSON string
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("stdin line 1"), std::string::npos) << r.err;

  r = tokenize("--tokenizer /nonexistent-tokenizer-dir", "\"x\"\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("/nonexistent-tokenizer-dir"), std::string::npos) << r.err;
}

}  // namespace
#include "tests/support/temp_dir.h"
