// Prompt files -> PromptRecords: format choice, the line loop shared by the text and
// JSONL formats (BOM, CRLF, blank lines, line numbers), and the text format itself.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <unordered_map>

#include "src/io/jsonl_prompt.h"
#include "src/io/line_reader.h"
#include "tiergen/common/error.h"
#include "tiergen/io/prompts.h"

namespace tiergen::io {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool is_blank(std::string_view line) { return line.find_first_not_of(" \t") == std::string_view::npos; }

// Unknown extension or stdin: JSONL when the first real line opens an object.
PromptFormat sniff(std::string_view first_line) {
  const auto p = first_line.find_first_not_of(" \t");
  return p != std::string_view::npos && first_line[p] == '{' ? PromptFormat::Jsonl : PromptFormat::Text;
}

PromptRecord parse_text_prompt(std::string_view line, const std::string& name, int64_t line_number,
                               int64_t index) {
  size_t bad = 0;
  TG_CHECK(valid_utf8(line, &bad),
           "{}:{}: invalid UTF-8 at column {} (byte 0x{:02X}); is the file in another encoding?", name,
           line_number, bad + 1, static_cast<unsigned>(static_cast<unsigned char>(line[bad])));
  PromptRecord record;
  record.index = index;
  record.line = line_number;
  record.id = std::to_string(index);
  record.text = std::string(line);
  return record;
}

}  // namespace

PromptFormat parse_prompt_format(const std::string& name) {
  const auto n = lower(name);
  if (n == "auto") return PromptFormat::Auto;
  if (n == "text" || n == "txt") return PromptFormat::Text;
  if (n == "jsonl" || n == "json") return PromptFormat::Jsonl;
  TG_THROW("unknown prompt format \"{}\" (expected auto, text or jsonl)", name);
}

std::string prompt_format_name(PromptFormat format) {
  switch (format) {
    case PromptFormat::Auto: return "auto";
    case PromptFormat::Text: return "text";
    case PromptFormat::Jsonl: return "jsonl";
  }
  return "?";
}

PromptFormat format_from_extension(const std::string& path) {
  const auto ext = lower(std::filesystem::path(path).extension().string());
  if (ext == ".txt") return PromptFormat::Text;
  if (ext == ".jsonl" || ext == ".json") return PromptFormat::Jsonl;
  return PromptFormat::Auto;
}

std::vector<PromptRecord> read_prompts(std::istream& in, const std::string& name, PromptFormat format,
                                       const ReadOptions& options) {
  // A .txt name makes each line a prompt as written; a user who put JSONL requests in
  // one hears so once (an explicit --format text is taken at its word).
  bool warn_if_json = false;
  if (format == PromptFormat::Auto) {
    format = format_from_extension(name);
    warn_if_json = format == PromptFormat::Text;
  }
  LineReader reader(in, name, options.max_line_bytes);
  std::vector<PromptRecord> prompts;
  std::string line;
  while (reader.next(line)) {
    std::string_view view(line);
    if (reader.line_number() == 1 && view.substr(0, 3) == "\xEF\xBB\xBF") view.remove_prefix(3);
    if (!view.empty() && view.back() == '\r') view.remove_suffix(1);
    if (is_blank(view)) continue;
    if (format == PromptFormat::Auto) {
      format = sniff(view);
      spdlog::info("{}: reading prompts as {}", name, prompt_format_name(format));
    }
    if (warn_if_json && sniff(view) == PromptFormat::Jsonl) {
      spdlog::warn("{}:{}: the file is read as plain text (its name ends in .txt), so each line is a prompt as "
                   "written, but this line looks like a JSON request; use --format jsonl or a .jsonl name for JSONL",
                   name, reader.line_number());
    }
    warn_if_json = false;
    const auto index = static_cast<int64_t>(prompts.size());
    prompts.push_back(format == PromptFormat::Text
                          ? parse_text_prompt(view, name, reader.line_number(), index)
                          : parse_jsonl_prompt(view, name, reader.line_number(), index));
  }
  TG_CHECK(!prompts.empty(), "{}: no prompts", name);

  // Results are matched to prompts by position, but whoever joins the results with
  // their requests does so by id (the OpenAI Batch API requires unique custom_ids): a
  // repeated id fails that request, naming the line that had it first.
  std::unordered_map<std::string, int64_t> first_line;
  for (auto& p : prompts) {
    const auto [it, fresh] = first_line.emplace(p.id, p.line);
    if (fresh || p.error) continue;
    p.error = fmt::format("{}:{}: the id \"{}\" is already the id of line {}; ids must be unique in a prompt file",
                          name, p.line, p.id, it->second);
  }
  return prompts;
}

std::vector<PromptRecord> read_prompts(const std::string& path, PromptFormat format,
                                       const ReadOptions& options) {
  if (path == "-") return read_prompts(std::cin, "<stdin>", format, options);
  std::error_code ec;
  TG_CHECK(!std::filesystem::is_directory(path, ec), "{}: is a directory, not a prompt file", path);
  std::ifstream in(path, std::ios::binary);
  TG_CHECK(in.is_open(), "{}: cannot open prompt file: {}", path, std::strerror(errno));
  return read_prompts(in, path, format, options);
}

std::vector<std::string> prompt_ids(const std::vector<PromptRecord>& prompts) {
  std::vector<std::string> ids;
  ids.reserve(prompts.size());
  for (const auto& p : prompts) ids.push_back(p.id);
  return ids;
}

}  // namespace tiergen::io
