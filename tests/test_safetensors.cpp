// safetensors reading and writing: round trips, offsets usable without the mapping,
// strict validation of corrupt files, and a writer that never leaves a partial file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "tiergen/common/error.h"
#include "tiergen/model/safetensors.h"
#include "tests/support/temp_dir.h"

namespace tiergen::model {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  test::TempDir temp_{"tiergen-st"};
  std::string dir_ = temp_.path;
};

std::vector<uint8_t> read_bytes(const std::string& path, uint64_t offset, uint64_t size) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  std::vector<uint8_t> out(size);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(size));
  EXPECT_EQ(static_cast<uint64_t>(in.gcount()), size);
  return out;
}

// A file with a hand-made header: `length` overrides the header length field.
std::string raw_file(const std::string& header, const std::string& data = "", int64_t length = -1) {
  const uint64_t n = length < 0 ? header.size() : static_cast<uint64_t>(length);
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(n >> (8 * i));
  return bytes + header + data;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string open_error(const std::string& path) {
  try {
    SafetensorsFile::open(path);
  } catch (const tiergen::Error& e) {
    return e.what();
  }
  return "<no error>";
}

std::vector<uint8_t> pattern_bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + 31 * i);
  return v;
}

TEST(SafetensorsDType, SizesNamesAndParsing) {
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  for (DType d : {DType::F32, DType::F16, DType::BF16}) {
    EXPECT_EQ(parse_safetensors_dtype(dtype_name(d), "f", "t"), d);
  }
  try {
    parse_safetensors_dtype("I64", "w.safetensors", "model.x");
    FAIL() << "I64 accepted";
  } catch (const tiergen::Error& e) {
    EXPECT_NE(std::string(e.what()).find("w.safetensors"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("model.x"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("I64"), std::string::npos);
  }
}

TEST_F(SafetensorsTest, SingleFileRoundTrip) {
  const auto a = pattern_bytes(2 * 3 * 4, 1), b = pattern_bytes(5 * 2, 2), c = pattern_bytes(3 * 2 * 1 * 2, 3),
             s = pattern_bytes(4, 4);
  std::vector<TensorToWrite> in = {
      {"zeta.weight", DType::F32, {2, 3}, a.data(), a.size()},
      {"alpha.bias", DType::F16, {5}, b.data(), b.size()},
      {"mid.bf16", DType::BF16, {3, 2, 1}, c.data(), c.size()},
      {"scalar", DType::F32, {}, s.data(), s.size()},
      {"empty", DType::F16, {0, 7}, nullptr, 0},
  };
  const std::string p = path("model.safetensors");
  write_safetensors(p, in, {{"format", "pt"}});
  EXPECT_FALSE(fs::exists(p + ".tmp"));

  auto file = SafetensorsFile::open(p);
  EXPECT_EQ(file->path(), p);
  EXPECT_EQ(file->data_start() % 8, 0u) << "header must be padded to 8 bytes";
  EXPECT_EQ(file->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(file->tensors().size(), in.size());
  EXPECT_TRUE(file->unsupported().empty());
  EXPECT_EQ(file->find("missing"), nullptr);
  for (const auto& w : in) {
    SCOPED_TRACE(w.name);
    const TensorInfo* t = file->find(w.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->name, w.name);
    EXPECT_EQ(t->dtype, w.dtype);
    EXPECT_EQ(t->shape, w.shape);
    EXPECT_EQ(t->file, p);
    EXPECT_EQ(t->nbytes, w.nbytes);
    EXPECT_GE(t->file_offset, file->data_start());
    if (w.nbytes > 0) {
      EXPECT_EQ(std::memcmp(t->data, w.data, w.nbytes), 0);
      // The runtime reads disk-homed tensors from the file itself at file_offset.
      const auto on_disk = read_bytes(p, t->file_offset, t->nbytes);
      EXPECT_EQ(std::memcmp(on_disk.data(), w.data, w.nbytes), 0);
    }
  }
  EXPECT_EQ(file->find("scalar")->numel(), 1);
  EXPECT_EQ(file->find("empty")->numel(), 0);
  // Tensors are laid out in name order.
  EXPECT_LT(file->find("alpha.bias")->file_offset, file->find("mid.bf16")->file_offset);
  EXPECT_LT(file->find("mid.bf16")->file_offset, file->find("zeta.weight")->file_offset);
}

TEST_F(SafetensorsTest, ShardedWriteSplitsByBytesAndWritesIndex) {
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<TensorToWrite> in;
  for (int i = 0; i < 5; ++i) buffers.push_back(pattern_bytes(64, static_cast<uint8_t>(i)));
  for (int i = 0; i < 5; ++i) in.push_back({"t" + std::to_string(i), DType::F32, {16}, buffers[i].data(), 64});
  const auto shards = write_safetensors_sharded(path("sharded"), in, 128);
  ASSERT_EQ(shards.size(), 3u);
  EXPECT_EQ(shards[0], "model-00001-of-00003.safetensors");
  EXPECT_EQ(shards[2], "model-00003-of-00003.safetensors");
  ASSERT_TRUE(fs::exists(path("sharded/model.safetensors.index.json")));
  std::ifstream index_in(path("sharded/model.safetensors.index.json"));
  const std::string index((std::istreambuf_iterator<char>(index_in)), std::istreambuf_iterator<char>());
  EXPECT_NE(index.find("\"total_size\": 320"), std::string::npos) << index;
  EXPECT_NE(index.find("\"t4\": \"model-00003-of-00003.safetensors\""), std::string::npos) << index;
  auto last = SafetensorsFile::open(path("sharded/" + shards[2]));
  ASSERT_EQ(last->tensors().size(), 1u);
  EXPECT_EQ(std::memcmp(last->find("t4")->data, buffers[4].data(), 64), 0);
}

TEST_F(SafetensorsTest, OtherDtypesAreListedApart) {
  const std::string header =
      R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},"w":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}})";
  write_file(path("mixed.safetensors"), raw_file(header, std::string(20, 'x')));
  auto file = SafetensorsFile::open(path("mixed.safetensors"));
  ASSERT_EQ(file->tensors().size(), 1u);
  ASSERT_EQ(file->unsupported().size(), 1u);
  EXPECT_EQ(file->find("ids"), nullptr);
  ASSERT_NE(file->find_unsupported("ids"), nullptr);
  EXPECT_EQ(file->find_unsupported("ids")->dtype, "I64");
  EXPECT_EQ(file->find_unsupported("ids")->file_offset, 8 + header.size());
  EXPECT_EQ(file->find("w")->file_offset, 8 + header.size() + 16);
}

struct CorruptCase {
  std::string label;
  std::string bytes;
  std::string tensor;    // must appear in the message when not empty
  std::string expected;  // a phrase the message must contain
};

std::vector<CorruptCase> corrupt_cases() {
  auto entry = [](const std::string& name, const std::string& body) { return "\"" + name + "\":{" + body + "}"; };
  const std::string ok = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";
  return {
      {"empty file", "", "", "too short"},
      {"shorter than the length field", std::string(5, '\0'), "", "too short"},
      {"header length past the end", raw_file("{}", "", 4096), "", "exceeds the file size"},
      {"absurd header length", raw_file("{}", "", int64_t(1) << 40), "", "absurd"},
      {"header is not JSON", raw_file("{\"a\": [1, 2"), "", "not valid JSON"},
      {"header is binary garbage", raw_file(std::string("\xff\xfe\x00\x01", 4)), "", "not valid JSON"},
      {"header is not an object", raw_file("[1,2,3]"), "", "not an object"},
      {"deeply nested header", raw_file(std::string(200000, '[') + std::string(200000, ']')), "", "not an object"},
      {"entry is not an object", raw_file("{\"w\":[1]}"), "w", "not an object"},
      {"missing dtype", raw_file("{" + entry("w", R"("shape":[2],"data_offsets":[0,8])") + "}", std::string(8, 0)),
       "w", "dtype"},
      {"unknown dtype", raw_file("{" + entry("w", R"("dtype":"Q4","shape":[2],"data_offsets":[0,8])") + "}",
                                 std::string(8, 0)),
       "w", "unknown dtype 'Q4'"},
      {"missing shape", raw_file("{" + entry("w", R"("dtype":"F32","data_offsets":[0,8])") + "}", std::string(8, 0)),
       "w", "shape"},
      {"negative dimension", raw_file("{" + entry("w", R"("dtype":"F32","shape":[-2],"data_offsets":[0,8])") + "}",
                                      std::string(8, 0)),
       "w", "non-negative integer"},
      {"fractional dimension", raw_file("{" + entry("w", R"("dtype":"F32","shape":[2.0],"data_offsets":[0,8])") + "}",
                                        std::string(8, 0)),
       "w", "non-negative integer"},
      {"missing data_offsets", raw_file("{" + entry("w", R"("dtype":"F32","shape":[2])") + "}", std::string(8, 0)),
       "w", "data_offsets"},
      {"three offsets", raw_file("{" + entry("w", R"("dtype":"F32","shape":[2],"data_offsets":[0,4,8])") + "}",
                                 std::string(8, 0)),
       "w", "pair of non-negative integers"},
      {"offsets decreasing", raw_file("{" + entry("w", R"("dtype":"F32","shape":[0],"data_offsets":[8,0])") + "}",
                                      std::string(8, 0)),
       "w", "end before they begin"},
      {"data past the end of the file", raw_file("{" + entry("w", ok) + "}", std::string(4, 0)), "w",
       "past the end of the file"},
      {"byte size not shape x dtype", raw_file("{" + entry("w", R"("dtype":"F32","shape":[3],"data_offsets":[0,8])") + "}",
                                               std::string(12, 0)),
       "w", "needs 12"},
      {"shape product overflows",
       raw_file("{" + entry("w", R"("dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8])") + "}",
                std::string(8, 0)),
       "w", "too large"},
      {"overlapping tensors",
       raw_file("{" + entry("a", ok) + "," + entry("b", R"("dtype":"F32","shape":[2],"data_offsets":[4,12])") + "}",
                std::string(12, 0)),
       "b", "overlap"},
      {"duplicate tensor name", raw_file("{" + entry("w", ok) + "," + entry("w", ok) + "}", std::string(8, 0)), "w",
       "more than once"},
      {"unknown entry field", raw_file("{" + entry("w", ok + R"(,"offset":3)") + "}", std::string(8, 0)), "w",
       "unknown header field 'offset'"},
      {"metadata not a string map", raw_file(R"({"__metadata__":{"format":1}})"), "format", "not a string"},
      {"metadata not an object", raw_file(R"({"__metadata__":"pt"})"), "__metadata__", "not an object"},
  };
}

TEST_F(SafetensorsTest, CorruptFilesGiveErrorsNamingFileAndTensor) {
  const auto cases = corrupt_cases();
  ASSERT_GE(cases.size(), 10u);
  int n = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string p = path("corrupt-" + std::to_string(n++) + ".safetensors");
    write_file(p, c.bytes);
    const std::string message = open_error(p);
    EXPECT_NE(message.find(p), std::string::npos) << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
    if (!c.tensor.empty()) EXPECT_NE(message.find("'" + c.tensor + "'"), std::string::npos) << message;
  }
}

// A header of many entries is read in time linear in its size: 100k entries (6 MB, far
// under the header limit) take a moment, where a parser that rescans the header per
// entry took minutes. The repeated name at the end is still found.
TEST_F(SafetensorsTest, AHeaderOfManyEntriesIsReadWholeAndItsRepeatsFound) {
  std::string header = "{";
  for (int i = 0; i < 100000; ++i) {
    header += "\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},";
  }
  header += "\"t5\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}";
  const std::string p = path("many.safetensors");
  write_file(p, raw_file(header));
  const std::string message = open_error(p);
  EXPECT_NE(message.find("'t5' more than once"), std::string::npos) << message;
  header.replace(header.rfind("\"t5\""), 4, "\"u5\"");
  write_file(p, raw_file(header));
  EXPECT_EQ(SafetensorsFile::open(p)->tensors().size(), 100001u);
}

TEST_F(SafetensorsTest, OpeningMissingFileOrDirectoryFails) {
  EXPECT_NE(open_error(path("absent.safetensors")).find("absent.safetensors"), std::string::npos);
  EXPECT_NE(open_error(dir_).find("not a regular file"), std::string::npos);
}

// Truncations and random byte flips of a valid file must give tiergen::Error or a
// valid result, never a crash or another exception type (run under ASan in CI).
TEST_F(SafetensorsTest, MutatedBuffersNeverCrash) {
  const auto a = pattern_bytes(24, 9), b = pattern_bytes(6, 5);
  write_safetensors(path("seed.safetensors"), {{"a", DType::F32, {2, 3}, a.data(), a.size()},
                                               {"b", DType::BF16, {3}, b.data(), b.size()}},
                    {{"k", "v"}});
  std::ifstream in(path("seed.safetensors"), std::ios::binary);
  const std::vector<uint8_t> seed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto check = [](const std::vector<uint8_t>& bytes) {
    try {
      const auto h = parse_safetensors_header(bytes.data(), bytes.size(), "mutant");
      for (const auto& t : h.tensors) ASSERT_LE(t.file_offset + t.nbytes, bytes.size());
    } catch (const tiergen::Error&) {
    }
  };
  for (size_t len = 0; len < seed.size(); ++len) {
    EXPECT_THROW(parse_safetensors_header(seed.data(), len, "truncated"), tiergen::Error) << len;
  }
  std::mt19937 rng(1234);
  for (int i = 0; i < 3000; ++i) {
    auto bytes = seed;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    ASSERT_NO_FATAL_FAILURE(check(bytes));
  }
}

TEST_F(SafetensorsTest, WriterLeavesNoFileWhenItFails) {
  const auto a = pattern_bytes(8, 1);
  // Unwritable location: the directory does not exist.
  const std::string nowhere = path("no-such-dir/model.safetensors");
  EXPECT_THROW(write_safetensors(nowhere, {{"a", DType::F32, {2}, a.data(), 8}}), tiergen::Error);
  EXPECT_FALSE(fs::exists(nowhere));
  EXPECT_FALSE(fs::exists(nowhere + ".tmp"));

  // Bad input after a good file exists: the good file stays as it was.
  const std::string p = path("model.safetensors");
  write_safetensors(p, {{"a", DType::F32, {2}, a.data(), 8}});
  const auto before = fs::file_size(p);
  try {
    write_safetensors(p, {{"a", DType::F32, {3}, a.data(), 8}});
    FAIL() << "size mismatch accepted";
  } catch (const tiergen::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_safetensors(p, {{"a", DType::F32, {2}, a.data(), 8}, {"a", DType::F32, {2}, a.data(), 8}}),
               tiergen::Error);
  EXPECT_THROW(write_safetensors(p, {{"__metadata__", DType::F32, {2}, a.data(), 8}}), tiergen::Error);
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  EXPECT_EQ(fs::file_size(p), before);
  EXPECT_NE(SafetensorsFile::open(p)->find("a"), nullptr);

  // A sharded write whose input is bad writes no index.
  EXPECT_THROW(write_safetensors_sharded(path("bad-shards"), {{"a", DType::F16, {2}, a.data(), 8}}, 64),
               tiergen::Error);
  EXPECT_FALSE(fs::exists(path("bad-shards/model.safetensors.index.json")));
}

}  // namespace
}  // namespace tiergen::model
