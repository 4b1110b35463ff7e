#pragma once
// Byte sizes as users write them: "512MiB", "16GiB", "16GB", "1.5TB", "4096".
#include <cstdint>
#include <string>

namespace tiergen {

// Parses a size; a plain number means bytes. KB/MB/GB/TB are powers of 1000,
// KiB/MiB/GiB/TiB powers of 1024. Throws tiergen::Error naming `what` on bad input.
uint64_t parse_bytes(const std::string& text, const std::string& what = "size");

// "1.50 GiB"-style rendering for logs and tables.
std::string format_bytes(uint64_t bytes);

}  // namespace tiergen
