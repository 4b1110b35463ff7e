// Offline tests of the tokenizers on the tiny hand-made files in
// tests/fixtures/tokenizers (see make_fixtures.mjs there for their vocabularies).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tiergen/common/error.h"
#include "tiergen/tokenizer/tokenizer.h"
#include "tiergen/tokenizer/utf8.h"
#include "src/tokenizer/byte_level.h"
#include "tests/support/temp_dir.h"

namespace tiergen::tokenizer {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int64_t>;

std::string fixture(const std::string& name) { return std::string(TIERGEN_TEST_FIXTURES) + "/tokenizers/" + name; }

std::unique_ptr<Tokenizer> load_fixture(const std::string& name) { return Tokenizer::load(fixture(name)); }

// Expects load(dir) to throw a tiergen::Error whose message contains every needle.
void expect_load_error(const std::string& dir, const std::vector<std::string>& needles) {
  try {
    Tokenizer::load(dir);
    FAIL() << "loading " << dir << " should fail";
  } catch (const Error& e) {
    for (const auto& needle : needles) EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

std::string stream_decode(const Tokenizer& tok, const Ids& ids, std::vector<std::string>* chunks = nullptr) {
  StreamingDecoder decoder(tok);
  std::string text;
  for (int64_t id : ids) {
    const std::string piece = decoder.push(id);
    EXPECT_EQ(find_invalid_utf8(piece), kValidUtf8);
    if (chunks) chunks->push_back(piece);
    text += piece;
  }
  return text + decoder.flush();
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(std::ifstream(path)); }

// SentencePiece byte-fallback spellings: exactly "<0x" + two upper-case hex digits + ">".
TEST(ByteFallbackToken, OnlyItsExactSpellingIsAByte) {
  EXPECT_EQ(parse_byte_token("<0x41>"), 0x41);
  EXPECT_EQ(parse_byte_token("<0x00>"), 0);
  EXPECT_EQ(parse_byte_token("<0xFF>"), 255);
  for (const char* other : {"<0xff>", "<0x4G>", "<0x41", "0x41>", "<0x410>", "<0X41>", "", "A"}) {
    EXPECT_EQ(parse_byte_token(other), -1) << other;
  }
}

TEST(TokenizerFiles, ExistsIn) {
  EXPECT_TRUE(Tokenizer::exists_in(fixture("byte_level")));
  EXPECT_TRUE(Tokenizer::exists_in(fixture("vocab_merges")));
  EXPECT_FALSE(Tokenizer::exists_in(fixture("")));
  EXPECT_FALSE(Tokenizer::exists_in("/nonexistent/dir"));
}

TEST(ByteLevelBpe, MergesByRankThenLeftmost) {
  const auto tok = load_fixture("byte_level");
  EXPECT_EQ(tok->encode("hello world"), (Ids{264, 270}));
  // "the" alone has no "Ġ": only h+e merges. " thing": Ġt, h, in+g.
  EXPECT_EQ(tok->encode("the thing"), (Ids{116, 257, 256, 104, 260}));
  EXPECT_EQ(tok->encode(""), Ids{});
  EXPECT_EQ(tok->vocab_size(), 301);
  EXPECT_EQ(tok->token_to_id("Ġworld"), 270);
  EXPECT_EQ(tok->id_to_token(270), "Ġworld");
  EXPECT_EQ(tok->token_to_id("nope"), std::nullopt);
  EXPECT_THROW(tok->id_to_token(301), Error);
}

TEST(ByteLevelBpe, SpecialTokensInTextAndDecode) {
  const auto tok = load_fixture("byte_level");
  EXPECT_EQ(tok->eos_id(), 300);
  EXPECT_EQ(tok->bos_id(), 300);
  EXPECT_EQ(tok->pad_id(), -1);
  // post_processor ByteLevel adds nothing around a sequence.
  EXPECT_EQ(tok->encode("a<|endoftext|>b", true), (Ids{97, 300, 98}));
  EXPECT_EQ(tok->decode({97, 300, 98}), "ab");
  EXPECT_EQ(tok->decode({97, 300, 98}, false), "a<|endoftext|>b");
  EXPECT_TRUE(tok->is_special(300));
  EXPECT_FALSE(tok->is_special(97));
}

TEST(ByteLevelBpe, RoundTripsArbitraryText) {
  const auto tok = load_fixture("byte_level");
  for (const std::string s : {"Hello, World!  \n\tCafé 中文 👩‍👩‍👧 it's 12345", "   ", "\n\n", "😀😀"}) {
    EXPECT_EQ(tok->decode(tok->encode(s)), s);
  }
}

TEST(ByteLevelBpe, StreamingHoldsBackSplitCharacters) {
  const auto tok = load_fixture("byte_level");
  const std::string text = "a中😀b";
  const Ids ids = tok->encode(text);  // one id per byte: no merges apply
  ASSERT_EQ(ids.size(), 1 + 3 + 4 + 1u);
  std::vector<std::string> chunks;
  EXPECT_EQ(stream_decode(*tok, ids, &chunks), text);
  EXPECT_EQ(chunks, (std::vector<std::string>{"a", "", "", "中", "", "", "", "😀", "b"}));
}

TEST(ByteLevelBpe, DecodeReplacesInvalidBytes) {
  const auto tok = load_fixture("byte_level");
  EXPECT_EQ(tok->decode({0xE4, 0xB8}), "\xEF\xBF\xBD");            // cut-off character
  EXPECT_EQ(tok->decode({0xFF, 97}), "\xEF\xBF\xBD" "a");          // never valid
  StreamingDecoder stream(*tok);
  EXPECT_EQ(stream.push(0xE4), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
  EXPECT_THROW(tok->decode({-1}), Error);
  // Ids a model's vocabulary has beyond the tokenizer's decode to nothing (Hugging
  // Face does the same), so sampling one fails nothing.
  EXPECT_EQ(tok->decode({97, 301, 5000, 98}), "ab");
  EXPECT_EQ(stream_decode(*tok, {97, 301, 98}), "ab");
}

TEST(ByteLevelBpe, InvalidUtf8IsAnErrorNamingTheOffset) {
  const auto tok = load_fixture("byte_level");
  try {
    tok->encode("ab\xFF" "cd");
    FAIL() << "invalid UTF-8 must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte offset 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tok->encode("\xED\xA0\x80"), Error);  // a UTF-16 surrogate
  EXPECT_THROW(tok->encode("\xC0\xAF"), Error);      // overlong '/'
  EXPECT_THROW(tok->encode("abc\xE4\xB8"), Error);   // truncated at the end
  // The documented alternative: replace first, then encode.
  EXPECT_EQ(tok->decode(tok->encode(replace_invalid_utf8("ab\xFF" "cd"))), "ab\xEF\xBF\xBD" "cd");
}

TEST(VocabMergesFiles, OptStyleAddsBos) {
  const auto tok = load_fixture("vocab_merges");
  EXPECT_EQ(tok->bos_id(), 300);
  EXPECT_EQ(tok->eos_id(), 300);
  EXPECT_EQ(tok->pad_id(), 301);
  EXPECT_EQ(tok->encode("hello world"), (Ids{300, 264, 270}));
  EXPECT_EQ(tok->encode("hello world", false), (Ids{264, 270}));
  EXPECT_EQ(tok->decode({300, 264, 270, 301}), "hello world");
  EXPECT_EQ(tok->encode("<pad>", false), (Ids{301}));  // special tokens are matched in text
}

TEST(VocabMergesFiles, WithoutConfigEndOfTextIsEos) {
  test::TempDir dir{"tiergen-tok"};
  fs::copy_file(fixture("vocab_merges/vocab.json"), dir.path + "/vocab.json");
  fs::copy_file(fixture("vocab_merges/merges.txt"), dir.path + "/merges.txt");
  const auto tok = Tokenizer::load(dir.path);
  EXPECT_EQ(tok->eos_id(), 300);
  EXPECT_EQ(tok->encode("hello"), (Ids{264}));  // GPT-2 adds no BOS
  EXPECT_EQ(tok->encode("x<|endoftext|>", false), (Ids{120, 300}));
  EXPECT_EQ(tok->encode("x<pad>", false).size(), 6u);  // not special without a config
}

TEST(Llama3StyleBpe, SplitRegexIgnoreMergesAndTemplate) {
  const auto tok = load_fixture("llama3_style");
  EXPECT_EQ(tok->bos_id(), 400);
  EXPECT_EQ(tok->eos_id(), 401);
  // "Hello" is not a vocabulary word: merged from bytes (only l+l applies).
  // " Hello" is one: ignore_merges takes it whole.
  EXPECT_EQ(tok->encode("Hello Hello"), (Ids{400, 72, 101, 262, 111, 273}));
  EXPECT_EQ(tok->encode("Hello Hello", false), (Ids{72, 101, 262, 111, 273}));
  // Digits go in groups of at most three.
  EXPECT_EQ(tok->encode("12345", false), (Ids{271, 51, 52, 53}));
  EXPECT_EQ(tok->encode("<|eot_id|>hello<|end_of_text|>", false), (Ids{402, 264, 401}));
  EXPECT_EQ(tok->decode({400, 264, 402}), "hello");
  EXPECT_EQ(tok->decode({400, 264, 402}, false), "<|begin_of_text|>hello<|eot_id|>");
}

TEST(SentencePieceBpe, PrependReplaceAndBos) {
  const auto tok = load_fixture("sentencepiece");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->pad_id(), -1);
  // "▁Hello": l+l, e+ll, ell+o, H+ello leave "▁" alone (there is no "▁ Hello" merge).
  EXPECT_EQ(tok->encode("Hello world"), (Ids{1, 259, 298, 305}));
  EXPECT_EQ(tok->encode("Hello world", false), (Ids{259, 298, 305}));
  EXPECT_EQ(tok->decode({1, 259, 298, 305}), "Hello world");
  EXPECT_EQ(tok->token_to_id("▁world"), 305);
}

TEST(SentencePieceBpe, ByteFallbackAndStreaming) {
  const auto tok = load_fixture("sentencepiece");
  // "中" is not in the vocabulary: its three UTF-8 bytes become <0xE4><0xB8><0xAD>.
  const Ids ids = tok->encode("中", false);
  EXPECT_EQ(ids, (Ids{259, 3 + 0xE4, 3 + 0xB8, 3 + 0xAD}));
  EXPECT_EQ(tok->decode(ids), "中");
  std::vector<std::string> chunks;
  EXPECT_EQ(stream_decode(*tok, ids, &chunks), "中");
  EXPECT_EQ(chunks, (std::vector<std::string>{"", "", "", "中"}));
}

TEST(SentencePieceBpe, RoundTripAndLeadingSpace) {
  const auto tok = load_fixture("sentencepiece");
  for (const std::string s : {"Hello world", " leading", "  two", "trailing ", "é中😀!", "a\tb\nc", "Zürich"}) {
    const Ids ids = tok->encode(s);
    EXPECT_EQ(tok->decode(ids), s) << s;
    EXPECT_EQ(stream_decode(*tok, ids), s) << s;
  }
}

TEST(SentencePieceBpe, SpecialTokensSplitSections) {
  const auto tok = load_fixture("sentencepiece");
  // Each text section is normalized on its own, so "▁" is prepended after "<s>" too.
  EXPECT_EQ(tok->encode("Hello<s>world", false), (Ids{259, 298, 1, 305}));
  EXPECT_EQ(tok->decode({259, 298, 1, 305}, false), "Hello<s> world");
}

// Pre-tokenizers run piece by piece (each piece one step cuts goes through the rest
// of the chain before the next is cut): a Metaspace after a Split still prepends "▁"
// only to the input's first piece, as when each step runs over the whole text.
TEST(SentencePieceBpe, MetaspaceAfterSplitPrependsOnlyToTheFirstPiece) {
  auto json = read_json(fixture("sentencepiece/tokenizer.json"));
  json["normalizer"] = nullptr;
  json["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"String", "\n"}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", true}}}}};
  test::TempDir dir{"tiergen-tok"};
  dir.write("tokenizer.json", json.dump());
  const auto tok = Tokenizer::load(dir.path);
  // "▁" "Hello" "▁world", then "\n" by byte fallback, then "Hello" "▁world" unprefixed.
  EXPECT_EQ(tok->encode("Hello world\nHello world", false), (Ids{259, 298, 305, 3 + '\n', 298, 305}));
  // After an added token the text is not the input's first section: nothing prepended.
  EXPECT_EQ(tok->encode("<s>Hello world", false), (Ids{1, 298, 305}));
}

// encode_tail is encode cut to its last ids, counting all of them, for every kind of
// tokenizer, with special and added tokens among the ids it drops and keeps.
TEST(TokenTail, IsTheEndOfEncodeAndCountsEveryId) {
  std::string text;
  for (int i = 0; i < 3000; ++i) text += fmt::format("Hello world {} é中😀! ", i) + (i % 97 == 0 ? "<s>" : "");
  for (const std::string name : {"byte_level", "llama3_style", "sentencepiece", "vocab_merges"}) {
    const auto tok = load_fixture(name);
    for (const bool special : {true, false}) {
      const Ids all = tok->encode(text, special);
      ASSERT_GT(all.size(), 10000u) << name;
      for (const std::size_t keep : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4097},
                                     all.size() - 1, all.size(), all.size() + 5}) {
        const TokenTail tail = tok->encode_tail(text, special, keep);
        EXPECT_EQ(tail.total, static_cast<int64_t>(all.size())) << name << " keep " << keep;
        const std::size_t kept = std::min(keep, all.size());
        EXPECT_EQ(tail.ids, Ids(all.end() - static_cast<std::ptrdiff_t>(kept), all.end())) << name << " keep " << keep;
      }
    }
  }
}

TEST(AddedTokens, LstripAndRstrip) {
  auto json = read_json(fixture("byte_level/tokenizer.json"));
  json["added_tokens"].push_back({{"id", 301}, {"content", "<sep>"}, {"special", true},
                                  {"lstrip", true}, {"rstrip", true}, {"normalized", false}, {"single_word", false}});
  test::TempDir dir{"tiergen-tok"};
  dir.write("tokenizer.json", json.dump());
  const auto tok = Tokenizer::load(dir.path);
  EXPECT_EQ(tok->encode("a  <sep>\t b"), (Ids{97, 301, 98}));
  EXPECT_EQ(tok->encode("<sep>"), (Ids{301}));
  // Longest match wins over a shorter token at the same position.
  EXPECT_EQ(tok->encode("<|endoftext|><sep>"), (Ids{300, 301}));
}

// Two vocabulary strings on one id (Hugging Face accepts it, decoding the id to
// either): both encode to the id, it decodes to the first in the file, and a warning
// names the id and both strings.
TEST(Vocabulary, AnIdGivenToTwoStringsDecodesToTheFirstWithAWarning) {
  auto json = read_json(fixture("byte_level/tokenizer.json"));
  const int64_t a = json["model"]["vocab"]["a"];
  json["model"]["vocab"]["zz-also-a"] = a;  // after "a" in the file (keys are written sorted)
  test::TempDir dir{"tiergen-tok"};
  dir.write("tokenizer.json", json.dump());
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
  auto logger = spdlog::default_logger();
  logger->sinks().push_back(sink);
  const auto tok = Tokenizer::load(dir.path);
  logger->sinks().pop_back();
  EXPECT_EQ(tok->token_to_id("zz-also-a"), a);
  EXPECT_EQ(tok->token_to_id("a"), a);
  EXPECT_EQ(tok->decode({a}), "a");
  EXPECT_EQ(tok->id_to_token(a), "a");
  std::string logged;
  for (const auto& line : sink->last_formatted()) logged += line;
  EXPECT_NE(logged.find(fmt::format("gives id {} to both 'a' and 'zz-also-a' (decoded as the first)", a)),
            std::string::npos) << logged;
}

TEST(TokenizerConfigFile, AddBosAndEosOverrideTemplate) {
  test::TempDir dir{"tiergen-tok"};
  fs::copy_file(fixture("sentencepiece/tokenizer.json"), dir.path + "/tokenizer.json");
  dir.write("tokenizer_config.json", R"({"add_bos_token": false, "add_eos_token": true,
                                         "bos_token": "<s>", "eos_token": {"__type": "AddedToken", "content": "</s>"},
                                         "pad_token": "<unk>"})");
  const auto tok = Tokenizer::load(dir.path);
  EXPECT_EQ(tok->encode("Hello"), (Ids{259, 298, 2}));
  EXPECT_EQ(tok->pad_id(), 0);
}

TEST(MalformedFiles, ClearErrors) {
  expect_load_error(fixture("malformed/truncated"), {"tokenizer.json", "not valid JSON"});
  expect_load_error(fixture("malformed/merge_out_of_vocab"), {"tokenizer.json", "merge 1", "'ab'"});
  expect_load_error(fixture("malformed/wordpiece"), {"tokenizer.json", "model.type", "WordPiece"});
  expect_load_error(fixture("malformed/bad_merges_txt"), {"merges.txt:3"});
  expect_load_error(fixture("does_not_exist"), {"does_not_exist"});
  expect_load_error(fixture("malformed"), {"no tokenizer files"});
}

TEST(MalformedFiles, BadFieldsNameTheField) {
  auto json = read_json(fixture("llama3_style/tokenizer.json"));
  auto broken = json;
  broken["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  test::TempDir a{"tiergen-tok"};
  a.write("tokenizer.json", broken.dump());
  expect_load_error(a.path, {"tokenizer.json", "pre_tokenizer.pretokenizers[0].pattern.Regex", "(unclosed"});

  broken = json;
  broken["model"]["vocab"]["Ġ"] = "zero";
  test::TempDir b{"tiergen-tok"};
  b.write("tokenizer.json", broken.dump());
  expect_load_error(b.path, {"model.vocab.Ġ", "integer"});

  // An id far beyond the vocabulary (found by fuzz_tokenizer: the id tables took
  // gigabytes) is refused by name, in the vocabulary and among the added tokens.
  broken = json;
  broken["model"]["vocab"]["Ġ"] = 1 << 30;
  test::TempDir huge{"tiergen-tok"};
  huge.write("tokenizer.json", broken.dump());
  expect_load_error(huge.path, {"tokenizer.json", "token id 1073741824", "far beyond"});
  broken = json;
  broken["added_tokens"].push_back({{"id", 2000000000}, {"content", "<far>"}, {"special", true}});
  test::TempDir far{"tiergen-tok"};
  far.write("tokenizer.json", broken.dump());
  expect_load_error(far.path, {"tokenizer.json", "token id 2000000000", "far beyond"});

  broken = json;
  broken["normalizer"] = {{"type", "NFKC"}};
  test::TempDir c{"tiergen-tok"};
  c.write("tokenizer.json", broken.dump());
  expect_load_error(c.path, {"normalizer", "NFKC"});

  test::TempDir d{"tiergen-tok"};
  d.write("tokenizer.json", json.dump());
  d.write("tokenizer_config.json", R"({"add_bos_token": "yes"})");
  expect_load_error(d.path, {"tokenizer_config.json", "add_bos_token"});
}

TEST(SentencePieceBpe, ConcurrentEncodesAgree) {
  const auto tok = load_fixture("sentencepiece");
  const std::string text = "Hello world 中文 the world Hello é!";
  const Ids expected = tok->encode(text);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) ok[t] += tok->encode(text) == expected;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, std::vector<int>(4, 200));
}

TEST(Utf8, ValidationAndReplacement) {
  EXPECT_EQ(find_invalid_utf8("plain ascii"), kValidUtf8);
  EXPECT_EQ(find_invalid_utf8("é中😀"), kValidUtf8);
  EXPECT_EQ(find_invalid_utf8("ok\x80"), 2u);
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  // One U+FFFD per maximal ill-formed subpart.
  EXPECT_EQ(replace_invalid_utf8("a\xF0\x9F\x98" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(replace_invalid_utf8("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(complete_utf8_prefix("ab\xF0\x9F"), 2u);
  EXPECT_EQ(complete_utf8_prefix("ab\xFF"), 3u);
  EXPECT_EQ(complete_utf8_prefix("中"), 3u);
}

}  // namespace
}  // namespace tiergen::tokenizer
