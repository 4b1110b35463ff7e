#pragma once
// Test support: reads a NumPy .npy file of little-endian float32 in C order (what
// numpy.save writes for a float32 array), as a CPU tensor of its shape.
#include <ATen/ATen.h>

#include <cstdint>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tiergen::test {

inline at::Tensor read_npy_float32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  char magic[8];
  in.read(magic, 8);
  if (!in || std::string(magic, 6) != "\x93NUMPY") throw std::runtime_error(path + ": not a .npy file");
  const int major = static_cast<unsigned char>(magic[6]);
  uint32_t header_len = 0;
  if (major == 1) {
    unsigned char b[2];
    in.read(reinterpret_cast<char*>(b), 2);
    header_len = b[0] | (b[1] << 8);
  } else {
    unsigned char b[4];
    in.read(reinterpret_cast<char*>(b), 4);
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  }
  std::string header(header_len, '\0');
  in.read(header.data(), header_len);
  if (!in) throw std::runtime_error(path + ": truncated header");
  if (header.find("'descr': '<f4'") == std::string::npos) throw std::runtime_error(path + ": not little-endian float32");
  if (header.find("'fortran_order': False") == std::string::npos) throw std::runtime_error(path + ": not C order");
  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"('shape': \(([0-9, ]*)\))"))) {
    throw std::runtime_error(path + ": no shape in header");
  }
  std::vector<int64_t> shape;
  std::stringstream dims(m[1].str());
  for (std::string d; std::getline(dims, d, ',');) {
    if (d.find_first_not_of(' ') != std::string::npos) shape.push_back(std::stoll(d));
  }
  at::Tensor t = at::empty(shape, at::kFloat);
  in.read(reinterpret_cast<char*>(t.data_ptr<float>()), static_cast<std::streamsize>(t.nbytes()));
  if (!in) throw std::runtime_error(path + ": fewer values than its shape");
  return t;
}

}  // namespace tiergen::test
