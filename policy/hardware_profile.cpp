#include "policy/hardware_profile.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <array>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernels_revision.h"
#include "tiergen/common/error.h"
#include "tiergen/common/torch_compat.h"

// Generated at build time from configs/hw/*.json: (file stem, JSON text).
namespace tiergen::policy {
const std::vector<std::pair<std::string, std::string>>& builtin_profile_texts();
}

namespace tiergen::policy {

using nlohmann::json;

namespace {

// One numeric field of the file: its JSON location ("group.key") and its member.
struct NumberField {
  const char* group;
  const char* key;
  double HardwareProfile::*member;
};

const std::vector<NumberField>& number_fields() {
  static const std::vector<NumberField> fields = {
      {"bandwidth", "cpu_to_gpu", &HardwareProfile::cpu_to_gpu},
      {"bandwidth", "cpu_to_gpu_cache", &HardwareProfile::cpu_to_gpu_cache},
      {"bandwidth", "gpu_to_cpu_cache", &HardwareProfile::gpu_to_cpu_cache},
      {"bandwidth", "gpu_to_cpu_hidden", &HardwareProfile::gpu_to_cpu_hidden},
      {"bandwidth", "disk_to_cpu", &HardwareProfile::disk_to_cpu},
      {"bandwidth", "disk_to_cpu_cache", &HardwareProfile::disk_to_cpu_cache},
      {"bandwidth", "cpu_to_disk_cache_prefill", &HardwareProfile::cpu_to_disk_cache_prefill},
      {"bandwidth", "cpu_to_disk_hidden_prefill", &HardwareProfile::cpu_to_disk_hidden_prefill},
      {"bandwidth", "cpu_to_disk_decode", &HardwareProfile::cpu_to_disk_decode},
      {"bandwidth", "gpu_memory", &HardwareProfile::gpu_memory_bandwidth},
      {"gpu_flops", "mm_prefill", &HardwareProfile::mm_flops_prefill},
      {"gpu_flops", "mm_decode", &HardwareProfile::mm_flops_decode},
      {"gpu_flops", "bmm_prefill", &HardwareProfile::bmm_flops_prefill},
      {"gpu_flops", "bmm_decode", &HardwareProfile::bmm_flops_decode},
      {"cpu", "memory_bandwidth", &HardwareProfile::cpu_memory_bandwidth},
      {"cpu", "attention_bandwidth", &HardwareProfile::cpu_attention_bandwidth},
      {"cpu", "io_bandwidth_per_thread", &HardwareProfile::io_bandwidth_per_thread},
      {"compression", "gpu_quantize", &HardwareProfile::gpu_quantize},
      {"compression", "gpu_dequantize", &HardwareProfile::gpu_dequantize},
      {"compression", "cpu_quantize", &HardwareProfile::cpu_quantize},
      {"compression", "cpu_dequantize", &HardwareProfile::cpu_dequantize},
  };
  return fields;
}

// `group` as a C string: a std::string parameter bound to a temporary made GCC 14 warn
// that the returned reference (into j) might dangle.
const json& group_of(const json& j, const char* group, const std::string& source) {
  TG_CHECK(j.contains(group), "{}: hardware profile has no '{}' section", source, group);
  TG_CHECK(j.at(group).is_object(), "{}: hardware profile field '{}' must be an object", source, group);
  return j.at(group);
}

double number_at(const json& group, const std::string& name, const std::string& source) {
  const std::string key = name.substr(name.find('.') + 1);
  TG_CHECK(group.contains(key), "{}: hardware profile has no field '{}'", source, name);
  TG_CHECK(group.at(key).is_number(), "{}: hardware profile field '{}' must be a number", source, name);
  const double value = group.at(key).get<double>();
  TG_CHECK(value > 0, "{}: hardware profile field '{}' must be positive, got {}", source, name, value);
  return value;
}

void check_keys(const json& j, const std::set<std::string>& known, const std::string& where,
                const std::string& source) {
  for (const auto& [key, value] : j.items()) {
    TG_CHECK(known.count(key), "{}: unknown hardware profile field '{}{}'", source, where, key);
  }
}

void read_capacities(HardwareProfile& p, const json& j, const std::string& source) {
  const json& c = group_of(j, "capacity", source);
  check_keys(c, {"gpu", "cpu", "disk"}, "capacity.", source);
  p.gpu_memory = static_cast<uint64_t>(number_at(c, "capacity.gpu", source));
  p.cpu_memory = static_cast<uint64_t>(number_at(c, "capacity.cpu", source));
  p.disk_memory = static_cast<uint64_t>(number_at(c, "capacity.disk", source));
}

// The optional "stage_link" group (`tiergen profile --link`).
void read_stage_link(HardwareProfile& p, const json& j, const std::string& source) {
  if (!j.contains("stage_link")) return;
  const json& link = group_of(j, "stage_link", source);
  check_keys(link, {"bandwidth", "latency"}, "stage_link.", source);
  p.stage_link_bandwidth = number_at(link, "stage_link.bandwidth", source);
  if (link.contains("latency")) p.stage_link_latency = number_at(link, "stage_link.latency", source);
}

// The optional "schedule" group: the runtime's fixed cost per step, beyond its work.
void read_schedule_costs(HardwareProfile& p, const json& j, const std::string& source) {
  if (!j.contains("schedule")) return;
  const json& group = group_of(j, "schedule", source);
  check_keys(group, {"step_seconds"}, "schedule.", source);
  if (group.contains("step_seconds")) p.step_seconds = number_at(group, "schedule.step_seconds", source);
}

// Fields a profile may leave out (older profiles, built-ins without a measurement).
template <class Profile>
auto optional_cpu_fields(Profile& p) {
  return std::array{std::pair{"matmul_flops", &p.cpu_matmul_flops}, std::pair{"gemv_bandwidth", &p.cpu_gemv_bandwidth},
                    std::pair{"attention_call_seconds", &p.cpu_attention_call_seconds},
                    std::pair{"attention_task_seconds", &p.cpu_attention_task_seconds},
                    std::pair{"dequantize_tiles", &p.cpu_dequantize_tiles},
                    std::pair{"disk_read_core_bandwidth", &p.disk_read_core_bandwidth}};
}

void read_thread_scaling(HardwareProfile& p, const json& cpu, const std::string& source) {
  TG_CHECK(cpu.contains("threads") && cpu.at("threads").is_number_integer(),
           "{}: hardware profile field 'cpu.threads' must be an integer", source);
  p.cpu_threads = cpu.at("threads").get<int>();
  if (!cpu.contains("thread_scaling")) return;
  const json& s = cpu.at("thread_scaling");
  TG_CHECK(s.is_array(), "{}: hardware profile field 'cpu.thread_scaling' must be a list of [threads, speedup]",
           source);
  for (const auto& entry : s) {
    TG_CHECK(entry.is_array() && entry.size() == 2 && entry[0].is_number_integer() && entry[1].is_number(),
             "{}: hardware profile field 'cpu.thread_scaling' must hold [threads, speedup] pairs", source);
    p.cpu_thread_scaling.emplace_back(entry[0].get<int>(), entry[1].get<double>());
  }
}

void read_small_row_limit(HardwareProfile& p, const json& cpu, const std::string& source) {
  if (cpu.contains("product_dtype")) {
    const json& d = cpu.at("product_dtype");
    TG_CHECK(d.is_string(), "{}: hardware profile field 'cpu.product_dtype' must be a string", source);
    p.cpu_product_dtype = d.get<std::string>();
  }
  if (cpu.contains("small_matmul_max_rows")) {
    const json& r = cpu.at("small_matmul_max_rows");
    // (An unsigned JSON number beyond int64 would wrap to a negative one.)
    TG_CHECK(r.is_number_integer() && (!r.is_number_unsigned() || r.get<uint64_t>() <= uint64_t(INT64_MAX)),
             "{}: hardware profile field 'cpu.small_matmul_max_rows' must be a row count", source);
    p.cpu_small_matmul_max_rows = r.get<int64_t>();
  }
}

std::vector<std::pair<int64_t, double>> rates_at(const json& r, const std::string& name, const std::string& source);

void read_product_rates(HardwareProfile& p, const json& cpu, const std::string& source) {
  if (cpu.contains("product_rates")) p.cpu_product_rates = rates_at(cpu.at("product_rates"), "cpu.product_rates", source);
}

// [rows, value] pairs of `unit` ("bytes/s", "seconds").
std::vector<std::pair<int64_t, double>> row_pairs_at(const json& r, const std::string& name, const std::string& source,
                                                     const char* unit) {
  TG_CHECK(r.is_array(), "{}: hardware profile field '{}' must be a list of [rows, {}]", source, name, unit);
  std::vector<std::pair<int64_t, double>> pairs;
  for (const auto& entry : r) {
    TG_CHECK(entry.is_array() && entry.size() == 2 && entry[0].is_number_integer() && entry[1].is_number(),
             "{}: hardware profile field '{}' must hold [rows, {}] pairs", source, name, unit);
    pairs.emplace_back(entry[0].get<int64_t>(), entry[1].get<double>());
  }
  return pairs;
}

std::vector<std::pair<int64_t, double>> rates_at(const json& r, const std::string& name, const std::string& source) {
  return row_pairs_at(r, name, source, "bytes/s");
}

json rates_json(const std::vector<std::pair<int64_t, double>>& rates) {
  json out = json::array();
  for (const auto& [rows, rate] : rates) out.push_back({rows, rate});
  return out;
}

LoadedCacheAttention loaded_cache_attention_from_json(const json& a, const std::string& name,
                                                      const std::string& source) {
  TG_CHECK(a.is_object(), "{}: hardware profile field '{}' must be an object", source, name);
  check_keys(a, {"kv_bandwidth", "call_seconds", "unit_seconds", "position_seconds", "score_seconds"}, name + ".",
             source);
  const auto number = [&](const char* key, bool positive) {
    const bool present = a.contains(key) && a.at(key).is_number();
    const double value = present ? a.at(key).get<double>() : -1;
    TG_CHECK(present && (positive ? value > 0 : value >= 0) && value < 1e30,
             "{}: hardware profile field '{}.{}' must be a {} number", source, name, key,
             positive ? "positive" : "non-negative");
    return value;
  };
  LoadedCacheAttention out;
  out.kv_bandwidth = number("kv_bandwidth", true);
  out.call_seconds = number("call_seconds", false);
  out.unit_seconds = number("unit_seconds", false);
  out.position_seconds = number("position_seconds", false);
  out.score_seconds = number("score_seconds", false);
  TG_CHECK(out.call_seconds < 1 && out.unit_seconds < 1 && out.position_seconds < 1 && out.score_seconds < 1,
           "{}: hardware profile field '{}' has a cost of a second or more per call, unit, position or score", source,
           name);
  return out;
}

CpuProductTable product_table_from_json(const json& t, const std::string& name, const std::string& source) {
  TG_CHECK(t.is_object(), "{}: hardware profile field '{}' must be an object", source, name);
  check_keys(t,
             {"dtype", "kernel_path", "kernel_level", "kernels_revision", "rates", "matmul_flops", "gemv_bandwidth",
              "small_matmul_max_rows", "quantized", "call_seconds", "row_length", "short_row_rates",
              "short_row_length", "loaded_cache_attention"},
             name + ".", source);
  CpuProductTable table;
  TG_CHECK(t.contains("dtype") && t.at("dtype").is_string(), "{}: hardware profile field '{}.dtype' must be a string",
           source, name);
  table.dtype = t.at("dtype").get<std::string>();
  if (t.contains("kernel_path")) {
    TG_CHECK(t.at("kernel_path").is_string(), "{}: hardware profile field '{}.kernel_path' must be a string", source,
             name);
    table.kernel_path = t.at("kernel_path").get<std::string>();
  }
  if (t.contains("kernel_level")) {
    TG_CHECK(t.at("kernel_level").is_string(), "{}: hardware profile field '{}.kernel_level' must be a string", source,
             name);
    table.kernel_level = t.at("kernel_level").get<std::string>();
  }
  if (t.contains("kernels_revision")) {
    const json& r = t.at("kernels_revision");
    TG_CHECK(r.is_number_integer() && r.get<int64_t>() > 0 && r.get<int64_t>() <= 1000000,
             "{}: hardware profile field '{}.kernels_revision' must be a positive integer", source, name);
    table.kernels_revision = r.get<int>();
  }
  if (t.contains("rates")) table.rates = rates_at(t.at("rates"), name + ".rates", source);
  const auto rate = [&](const char* key) {
    if (!t.contains(key)) return 0.0;
    TG_CHECK(t.at(key).is_number() && t.at(key).get<double>() > 0,
             "{}: hardware profile field '{}.{}' must be a positive number", source, name, key);
    return t.at(key).get<double>();
  };
  table.matmul_flops = rate("matmul_flops");
  table.gemv_bandwidth = rate("gemv_bandwidth");
  if (t.contains("quantized")) {
    const json& q = t.at("quantized");
    TG_CHECK(q.is_array(), "{}: hardware profile field '{}.quantized' must be a list", source, name);
    for (size_t i = 0; i < q.size(); ++i) {
      const std::string where = fmt::format("{}.quantized[{}]", name, i);
      TG_CHECK(q[i].is_object() && q[i].contains("bits") && q[i].at("bits").is_number_integer() &&
                   q[i].contains("group_size") && q[i].at("group_size").is_number_integer() && q[i].contains("rates"),
               "{}: hardware profile field '{}' needs integer 'bits' and 'group_size' and 'rates'", source, where);
      check_keys(q[i], {"bits", "group_size", "rates", "call_seconds"}, where + ".", source);
      QuantizedProductRates rates{q[i].at("bits").get<int>(), q[i].at("group_size").get<int>(),
                                  rates_at(q[i].at("rates"), where + ".rates", source), {}};
      if (q[i].contains("call_seconds")) {
        rates.call_seconds = row_pairs_at(q[i].at("call_seconds"), where + ".call_seconds", source, "seconds");
      }
      table.quantized.push_back(std::move(rates));
    }
  }
  if (t.contains("small_matmul_max_rows")) {
    const json& r = t.at("small_matmul_max_rows");
    TG_CHECK(r.is_number_integer() && (!r.is_number_unsigned() || r.get<uint64_t>() <= uint64_t(INT64_MAX)),
             "{}: hardware profile field '{}.small_matmul_max_rows' must be a row count", source, name);
    table.small_matmul_max_rows = r.get<int64_t>();
  }
  if (t.contains("call_seconds")) {
    table.call_seconds = row_pairs_at(t.at("call_seconds"), name + ".call_seconds", source, "seconds");
  }
  const auto row_length = [&](const char* key) -> int64_t {
    if (!t.contains(key)) return 0;
    const json& r = t.at(key);
    TG_CHECK(r.is_number_integer() && r.get<int64_t>() > 0 && r.get<int64_t>() <= (int64_t(1) << 30),
             "{}: hardware profile field '{}.{}' must be a positive element count", source, name, key);
    return r.get<int64_t>();
  };
  table.row_length = row_length("row_length");
  table.short_row_length = row_length("short_row_length");
  if (t.contains("short_row_rates")) {
    table.short_row_rates = rates_at(t.at("short_row_rates"), name + ".short_row_rates", source);
  }
  if (t.contains("loaded_cache_attention")) {
    table.loaded_cache_attention =
        loaded_cache_attention_from_json(t.at("loaded_cache_attention"), name + ".loaded_cache_attention", source);
  }
  return table;
}

json product_table_json(const CpuProductTable& t) {
  json j = {{"dtype", t.dtype}};
  if (!t.kernel_path.empty()) j["kernel_path"] = t.kernel_path;
  if (!t.kernel_level.empty()) j["kernel_level"] = t.kernel_level;
  if (t.kernels_revision > 0) j["kernels_revision"] = t.kernels_revision;
  if (!t.rates.empty()) j["rates"] = rates_json(t.rates);
  if (t.matmul_flops > 0) j["matmul_flops"] = t.matmul_flops;
  if (t.gemv_bandwidth > 0) j["gemv_bandwidth"] = t.gemv_bandwidth;
  if (t.small_matmul_max_rows != 0) j["small_matmul_max_rows"] = t.small_matmul_max_rows;
  if (!t.call_seconds.empty()) j["call_seconds"] = rates_json(t.call_seconds);
  if (t.row_length > 0) j["row_length"] = t.row_length;
  if (!t.short_row_rates.empty()) j["short_row_rates"] = rates_json(t.short_row_rates);
  if (t.short_row_length > 0) j["short_row_length"] = t.short_row_length;
  if (t.loaded_cache_attention.timed()) {
    const LoadedCacheAttention& a = t.loaded_cache_attention;
    j["loaded_cache_attention"] = {{"kv_bandwidth", a.kv_bandwidth},
                                   {"call_seconds", a.call_seconds},
                                   {"unit_seconds", a.unit_seconds},
                                   {"position_seconds", a.position_seconds},
                                   {"score_seconds", a.score_seconds}};
  }
  if (!t.quantized.empty()) {
    j["quantized"] = json::array();
    for (const auto& q : t.quantized) {
      json entry = {{"bits", q.bits}, {"group_size", q.group_size}, {"rates", rates_json(q.rates)}};
      if (!q.call_seconds.empty()) entry["call_seconds"] = rates_json(q.call_seconds);
      j["quantized"].push_back(std::move(entry));
    }
  }
  return j;
}

// The per-dtype tables; a profile written before them, with one dtype named, gets that
// one as its table.
void read_product_tables(HardwareProfile& p, const json& cpu, const std::string& source) {
  if (cpu.contains("product_tables")) {
    const json& tables = cpu.at("product_tables");
    TG_CHECK(tables.is_array(), "{}: hardware profile field 'cpu.product_tables' must be a list", source);
    for (size_t i = 0; i < tables.size(); ++i) {
      p.cpu_product_tables.push_back(
          product_table_from_json(tables[i], fmt::format("cpu.product_tables[{}]", i), source));
    }
    if (const CpuProductTable* priced = p.cpu_product_table(p.cpu_product_dtype)) {
      p.cpu_quantized_product_rates = priced->quantized;
      p.cpu_call_seconds = priced->call_seconds;
      p.cpu_product_row_length = priced->row_length;
      p.cpu_short_row_rates = priced->short_row_rates;
      p.cpu_short_row_length = priced->short_row_length;
      p.cpu_loaded_cache_attention = priced->loaded_cache_attention;
    }
    return;
  }
  if (p.cpu_product_dtype.empty()) return;
  CpuProductTable legacy;  // no kernel path, level or revision recorded
  legacy.dtype = p.cpu_product_dtype;
  legacy.rates = p.cpu_product_rates;
  legacy.matmul_flops = p.cpu_matmul_flops;
  legacy.gemv_bandwidth = p.cpu_gemv_bandwidth;
  legacy.small_matmul_max_rows = p.cpu_small_matmul_max_rows;
  p.cpu_product_tables.push_back(legacy);
}

void validate_rates(const std::vector<std::pair<int64_t, double>>& rates, const std::string& what,
                    const std::string& where) {
  for (size_t i = 0; i < rates.size(); ++i) {
    TG_CHECK(rates[i].first >= 1 && rates[i].second > 0 && (i == 0 || rates[i].first > rates[i - 1].first),
             "{}: hardware profile field {} needs ascending row counts (at least 1) and positive rates", where, what);
  }
}

// Seconds per product call at ascending row counts: what a table's `call_seconds` and
// its quantized formats' hold.
void validate_call_seconds(const std::vector<std::pair<int64_t, double>>& call_seconds, const std::string& name,
                           const std::string& where) {
  for (size_t i = 0; i < call_seconds.size(); ++i) {
    const auto& [rows, seconds] = call_seconds[i];
    TG_CHECK(rows >= 1 && std::isfinite(seconds) && seconds >= 0 && seconds < 1 &&
                 (i == 0 || rows > call_seconds[i - 1].first),
             "{}: hardware profile field {} needs call_seconds of ascending row counts (at least 1) and seconds in "
             "[0, 1)", where, name);
  }
}

void validate_product_table(const CpuProductTable& t, const std::string& where) {
  TG_CHECK(compat::is_dtype_name(t.dtype),
           "{}: hardware profile field 'cpu.product_tables' has a table of dtype '{}': float32, float16 or bfloat16",
           where, t.dtype);
  validate_rates(t.rates, fmt::format("'cpu.product_tables' ({})", t.dtype), where);
  for (const auto& q : t.quantized) {
    TG_CHECK(q.bits == 4 || q.bits == 8, "{}: hardware profile field 'cpu.product_tables' ({}) has {}-bit rates: 4 or 8",
             where, t.dtype, q.bits);
    validate_rates(q.rates, fmt::format("'cpu.product_tables' ({}, {} bits)", t.dtype, q.bits), where);
    validate_call_seconds(q.call_seconds, fmt::format("'cpu.product_tables' ({}, {} bits)", t.dtype, q.bits), where);
  }
  validate_call_seconds(t.call_seconds, fmt::format("'cpu.product_tables' ({})", t.dtype), where);
  validate_rates(t.short_row_rates, fmt::format("'cpu.product_tables' ({}, short rows)", t.dtype), where);
  TG_CHECK(t.short_row_rates.empty() || (t.row_length > 0 && t.short_row_length > 0 && t.short_row_length < t.row_length),
           "{}: hardware profile field 'cpu.product_tables' ({}) has short_row_rates: it needs a row_length and a "
           "shorter short_row_length", where, t.dtype);
  const auto rows_of = [](const std::vector<std::pair<int64_t, double>>& rates) {
    std::vector<int64_t> rows;
    for (const auto& r : rates) rows.push_back(r.first);
    return rows;
  };
  TG_CHECK(t.short_row_rates.empty() || rows_of(t.short_row_rates) == rows_of(t.rates),
           "{}: hardware profile field 'cpu.product_tables' ({}) has short_row_rates at other row counts than its "
           "rates", where, t.dtype);
  TG_CHECK(t.matmul_flops >= 0 && t.gemv_bandwidth >= 0 && t.small_matmul_max_rows >= 0,
           "{}: hardware profile field 'cpu.product_tables' ({}) has a negative rate or row count", where, t.dtype);
}

// The order tables are kept in: float32, float16, bfloat16.
int dtype_rank(const std::string& dtype) { return dtype == "float32" ? 0 : dtype == "float16" ? 1 : 2; }

}  // namespace

bool operator==(const QuantizedProductRates& a, const QuantizedProductRates& b) {
  return a.bits == b.bits && a.group_size == b.group_size && a.rates == b.rates && a.call_seconds == b.call_seconds;
}

bool operator==(const LoadedCacheAttention& a, const LoadedCacheAttention& b) {
  return a.kv_bandwidth == b.kv_bandwidth && a.call_seconds == b.call_seconds && a.unit_seconds == b.unit_seconds &&
         a.position_seconds == b.position_seconds && a.score_seconds == b.score_seconds;
}

bool operator==(const CpuProductTable& a, const CpuProductTable& b) {
  return a.dtype == b.dtype && a.kernel_path == b.kernel_path && a.kernel_level == b.kernel_level &&
         a.kernels_revision == b.kernels_revision && a.rates == b.rates &&
         a.matmul_flops == b.matmul_flops && a.gemv_bandwidth == b.gemv_bandwidth &&
         a.small_matmul_max_rows == b.small_matmul_max_rows && a.quantized == b.quantized &&
         a.call_seconds == b.call_seconds && a.row_length == b.row_length && a.short_row_rates == b.short_row_rates &&
         a.short_row_length == b.short_row_length && a.loaded_cache_attention == b.loaded_cache_attention;
}

std::string stale_cpu_products(const CpuProductTable& table) {
  const std::string level = kernels::cpu_isa_name(kernels::cpu_isa_in_use());
  if (!table.kernel_level.empty() && table.kernel_level != level) {
    return fmt::format("at kernel level {}, and this process runs {}", table.kernel_level, level);
  }
  // A table timed before revisions were recorded names its kernel path but no revision:
  // revision 1. One with neither (hand-written, or older still) is not judged.
  const int revision = table.kernels_revision > 0 ? table.kernels_revision : table.kernel_path.empty() ? 0 : 1;
  if (revision > 0 && revision != kernels::kCpuProductKernelsRevision) {
    return fmt::format("with kernels of revision {}, and this build's are revision {}", revision,
                       kernels::kCpuProductKernelsRevision);
  }
  // Measured before the cost per call was: its layers would be priced by bytes alone.
  if (revision > 0 && !table.rates.empty() && table.call_seconds.empty()) {
    return "without the cost of a product call beside its bytes";
  }
  // Measured before short rows were: every row length would be priced at the long rows'
  // rates, and its call costs hold part of the short rows' cost.
  if (revision > 0 && !table.rates.empty() && table.short_row_rates.empty()) {
    return "without timing them over short rows";
  }
  return "";
}

namespace {

// `value` of a (rows, x) table's entries at `rows`: linear in rows between two counts, the
// first entry's at or below the first count; nullopt beyond the last (each caller says
// what holds there). `table` is not empty, its rows ascending.
template <typename Value>
std::optional<double> interpolated_in_rows(const std::vector<std::pair<int64_t, double>>& table, double rows,
                                           Value value) {
  if (rows <= double(table.front().first)) return value(table.front().second);
  for (size_t i = 1; i < table.size(); ++i) {
    if (rows <= double(table[i].first)) {
      const double t = (rows - double(table[i - 1].first)) / double(table[i].first - table[i - 1].first);
      return (1 - t) * value(table[i - 1].second) + t * value(table[i].second);
    }
  }
  return std::nullopt;
}

double inverse(double rate) { return 1 / rate; }

}  // namespace

std::optional<double> HardwareProfile::cpu_quantized_product_seconds(int bits, double rows, double stored_bytes) const {
  for (const auto& q : cpu_quantized_product_rates) {
    if (q.bits != bits || q.rates.empty()) continue;
    // Seconds per stored byte, linear in rows between the counts timed; beyond the largest
    // (the in-place limit), seconds grow with the rows.
    const auto& r = q.rates;
    const double beyond = rows / double(r.back().first) / r.back().second;
    return stored_bytes * interpolated_in_rows(r, rows, inverse).value_or(beyond);
  }
  return std::nullopt;
}

std::optional<double> HardwareProfile::cpu_quantized_call_seconds_at(int bits, double rows) const {
  for (const auto& q : cpu_quantized_product_rates) {
    if (q.bits != bits || q.call_seconds.empty()) continue;
    const auto& d = q.call_seconds;
    return interpolated_in_rows(d, rows, [](double seconds) { return seconds; }).value_or(d.back().second);
  }
  return std::nullopt;
}

const CpuProductTable* HardwareProfile::cpu_product_table(const std::string& dtype) const {
  for (const auto& t : cpu_product_tables) {
    if (t.dtype == dtype) return &t;
  }
  return nullptr;
}

HardwareProfile HardwareProfile::with_cpu_products_of(const std::string& dtype) const {
  HardwareProfile p = *this;
  if (!times_cpu_products_per_dtype()) return p;
  const CpuProductTable* table = cpu_product_table(dtype);
  p.price_cpu_products_with(table ? *table : CpuProductTable{});  // none: no dtype, nothing priced
  return p;
}

void HardwareProfile::price_cpu_products_with(const CpuProductTable& table) {
  cpu_product_dtype = table.dtype;
  cpu_product_rates = table.rates;
  cpu_matmul_flops = table.matmul_flops;
  cpu_gemv_bandwidth = table.gemv_bandwidth;
  cpu_small_matmul_max_rows = table.small_matmul_max_rows;
  cpu_quantized_product_rates = table.quantized;
  cpu_call_seconds = table.call_seconds;
  cpu_product_row_length = table.row_length;
  cpu_short_row_rates = table.short_row_rates;
  cpu_short_row_length = table.short_row_length;
  cpu_loaded_cache_attention = table.loaded_cache_attention;
}

void HardwareProfile::add_cpu_product_table(const CpuProductTable& table) {
  auto& tables = cpu_product_tables;
  tables.erase(std::remove_if(tables.begin(), tables.end(), [&](const auto& t) { return t.dtype == table.dtype; }),
               tables.end());
  const auto at = std::find_if(tables.begin(), tables.end(),
                               [&](const auto& t) { return dtype_rank(t.dtype) > dtype_rank(table.dtype); });
  tables.insert(at, table);
}

double HardwareProfile::thread_speedup(int threads) const {
  if (cpu_thread_scaling.empty() || threads <= 0) return 1.0;
  const auto& s = cpu_thread_scaling;
  if (threads <= s.front().first) return s.front().second * threads / s.front().first;
  for (size_t i = 1; i < s.size(); ++i) {
    if (threads <= s[i].first) {
      const double t = double(threads - s[i - 1].first) / (s[i].first - s[i - 1].first);
      return s[i - 1].second + t * (s[i].second - s[i - 1].second);
    }
  }
  return s.back().second;  // no gain measured beyond the largest count
}

// Without measurements, a policy that computes on the CPU is still predicted: the
// few-row product is memory-bound like decode attention (both read each byte once), and
// a CPU standing in for the GPU multiplies at its own rate; a real GPU's host gets a
// GEMM estimate of 4 FLOP per byte of attention bandwidth (a few hundred GFLOP/s on a
// server), to be replaced by `tiergen profile`.
double HardwareProfile::cpu_matmul_rate() const {
  if (cpu_matmul_flops > 0) return cpu_matmul_flops;
  return gpu_is_host ? mm_flops_prefill : 4 * cpu_attention_bandwidth;
}

namespace {

// Seconds per weight byte of rows `row_length` long at `rows` rows of x, given those of
// the main rates (`per_byte`): linear in log(row length) between the main rates' length
// and the short rows', and at the nearer one's outside them; the main rates' alone where
// the profile timed no short rows at that row count (or does not know the lengths).
double per_byte_at_row_length(const HardwareProfile& p, double rows, double per_byte, int64_t row_length) {
  const int64_t long_length = p.cpu_product_row_length, short_length = p.cpu_short_row_length;
  if (row_length <= 0 || long_length <= 0 || short_length <= 0 || row_length >= long_length ||
      p.cpu_short_row_rates.empty()) {
    return per_byte;
  }
  const std::optional<double> short_per_byte = interpolated_in_rows(p.cpu_short_row_rates, rows, inverse);
  if (!short_per_byte) return per_byte;
  if (row_length <= short_length) return *short_per_byte;
  const double t = std::log(double(row_length) / double(short_length)) / std::log(double(long_length) / double(short_length));
  return (1 - t) * *short_per_byte + t * per_byte;
}

// Seconds of a product by its bytes (and FLOPs) alone, as the rates were timed: seconds
// per weight byte linear in rows between the measured counts, at the products' row
// lengths (cpu_row_length_factor).
double product_seconds_by_bytes(const HardwareProfile& p, double rows, double weight_bytes, double flops,
                                const ProductRowLengths& row_lengths) {
  const auto& r = p.cpu_product_rates;
  if (r.empty()) return std::max(flops / p.cpu_matmul_rate(), weight_bytes / p.cpu_gemv_rate());
  const std::optional<double> per_byte = interpolated_in_rows(r, rows, inverse);
  if (!per_byte) return std::max(weight_bytes / r.back().second, flops / p.cpu_matmul_rate());
  return weight_bytes * *per_byte * p.cpu_row_length_factor(rows, row_lengths);
}

}  // namespace

double HardwareProfile::cpu_call_seconds_at(double rows) const {
  const auto& d = cpu_call_seconds;
  if (d.empty()) return 0;
  return interpolated_in_rows(d, rows, [](double seconds) { return seconds; }).value_or(d.back().second);
}

double HardwareProfile::cpu_row_length_factor(double rows, const ProductRowLengths& row_lengths) const {
  if (row_lengths.empty() || cpu_product_rates.empty()) return 1;
  // Beyond the last count timed, the factor there (in-place products run past it).
  rows = std::min(rows, double(cpu_product_rates.back().first));
  const std::optional<double> per_byte = interpolated_in_rows(cpu_product_rates, rows, inverse);
  if (!per_byte) return 1;
  double factor = 0;
  for (const RowLengthShare& share : row_lengths) {
    factor += share.bytes_fraction * per_byte_at_row_length(*this, rows, *per_byte, share.row_length) / *per_byte;
  }
  return factor;
}

double HardwareProfile::cpu_product_seconds(double rows, double weight_bytes, double flops, double calls,
                                            const ProductRowLengths& row_lengths) const {
  return product_seconds_by_bytes(*this, rows, weight_bytes, flops, row_lengths) + calls * cpu_call_seconds_at(rows);
}

double HardwareProfile::device_product_seconds(double rows, double weight_bytes, double flops, double flops_rate,
                                               double calls, const ProductRowLengths& row_lengths) const {
  const auto& timed = cpu_product_rates;
  if (gpu_is_host && !timed.empty()) return cpu_product_seconds(rows, weight_bytes, flops, calls, row_lengths);
  const double read_rate = !gpu_is_host            ? gpu_memory_bandwidth
                           : cpu_gemv_bandwidth > 0 ? cpu_gemv_bandwidth
                                                    : gpu_memory_bandwidth;
  return std::max(flops / flops_rate, weight_bytes / read_rate);
}

double HardwareProfile::cpu_gemv_rate() const {
  return cpu_gemv_bandwidth > 0 ? cpu_gemv_bandwidth : cpu_attention_bandwidth;
}

void HardwareProfile::validate(const std::string& where) const {
  for (const auto& f : number_fields()) {
    TG_CHECK(this->*f.member > 0, "{}: hardware profile field '{}.{}' must be positive", where, f.group, f.key);
  }
  TG_CHECK(cpu_threads >= 1, "{}: hardware profile field 'cpu.threads' must be at least 1", where);
  TG_CHECK(cpu_matmul_flops >= 0 && cpu_gemv_bandwidth >= 0,
           "{}: hardware profile fields 'cpu.matmul_flops' and 'cpu.gemv_bandwidth' must not be negative", where);
  TG_CHECK(cpu_attention_call_seconds >= 0 && cpu_attention_call_seconds < 1 && cpu_attention_task_seconds >= 0 &&
               cpu_attention_task_seconds < 1,
           "{}: hardware profile fields 'cpu.attention_call_seconds' and 'cpu.attention_task_seconds' must be "
           "seconds in [0, 1)",
           where);
  TG_CHECK(cpu_dequantize_tiles >= 0, "{}: hardware profile field 'cpu.dequantize_tiles' must not be negative",
           where);
  TG_CHECK(disk_read_core_bandwidth >= 0,
           "{}: hardware profile field 'cpu.disk_read_core_bandwidth' must not be negative", where);
  TG_CHECK(stage_link_bandwidth >= 0 && stage_link_latency >= 0,
           "{}: hardware profile fields 'stage_link.bandwidth' and 'stage_link.latency' must not be negative", where);
  TG_CHECK(step_seconds >= 0 && step_seconds < 1, "{}: hardware profile field 'schedule.step_seconds' must be seconds in [0, 1)",
           where);
  TG_CHECK(gpu_memory > 0 && cpu_memory > 0 && disk_memory > 0,
           "{}: hardware profile capacities must be positive", where);
  for (size_t i = 0; i < cpu_product_rates.size(); ++i) {
    const auto& [rows, rate] = cpu_product_rates[i];
    TG_CHECK(rows >= 1 && rate > 0 && (i == 0 || rows > cpu_product_rates[i - 1].first),
             "{}: hardware profile field 'cpu.product_rates' needs ascending row counts (at least 1) and positive "
             "rates",
             where);
  }
  TG_CHECK(cpu_product_dtype.empty() || compat::is_dtype_name(cpu_product_dtype),
           "{}: hardware profile field 'cpu.product_dtype' must be float32, float16 or bfloat16, not '{}'", where,
           cpu_product_dtype);
  TG_CHECK(cpu_small_matmul_max_rows >= 0, "{}: hardware profile field 'cpu.small_matmul_max_rows' must be a row count",
           where);
  TG_CHECK(cpu_small_matmul_max_rows == 0 || !cpu_product_dtype.empty(),
           "{}: hardware profile field 'cpu.small_matmul_max_rows' needs 'cpu.product_dtype', the dtype it was "
           "measured in",
           where);
  std::set<std::string> dtypes;
  for (const auto& t : cpu_product_tables) {
    validate_product_table(t, where);
    TG_CHECK(dtypes.insert(t.dtype).second, "{}: hardware profile field 'cpu.product_tables' has two {} tables", where,
             t.dtype);
  }
  for (size_t i = 0; i < cpu_thread_scaling.size(); ++i) {
    const auto& [threads, speedup] = cpu_thread_scaling[i];
    TG_CHECK(threads >= 1 && speedup > 0 && (i == 0 || threads > cpu_thread_scaling[i - 1].first),
             "{}: hardware profile field 'cpu.thread_scaling' needs ascending thread counts and positive speedups",
             where);
  }
}

json profile_to_json(const HardwareProfile& p) {
  json j;
  j["name"] = p.name;
  j["source"] = p.source;
  j["units"] = {{"bandwidth", "bytes/s"},
                {"gpu_flops", "FLOP/s"},
                {"cpu.memory_bandwidth", "bytes/s"},
                {"cpu.attention_bandwidth", "bytes of fp16 KV cache read by decode attention per second"},
                {"cpu.attention_call_seconds",
                 "seconds one decode attention call costs beside its bytes, at every core (optional)"},
                {"cpu.attention_task_seconds",
                 "seconds decode attention costs per task (a sequence's kv head) beside its bytes, at every core "
                 "(optional)"},
                {"cpu.io_bandwidth_per_thread", "bytes/s"},
                {"cpu.dequantize_tiles",
                 "bytes of dense bf16 data per second, 4-bit weights dequantized into tiles that stay in cache "
                 "(optional; else compression.cpu_dequantize)"},
                {"cpu.disk_read_core_bandwidth",
                 "bytes read from the disk tier per second of compute time the reads take from the cores "
                 "computing beside them (optional; absent: free)"},
                {"cpu.matmul_flops", "FLOP/s of many-row products over host weights (optional)"},
                {"cpu.gemv_bandwidth", "bytes of host weights read per second by few-row products (optional)"},
                {"cpu.product_rates",
                 "[rows, bytes of host weights per second] of one product of that many rows (optional)"},
                {"cpu.product_dtype", "dtype of the host weights in cpu.product_rates (optional)"},
                {"cpu.small_matmul_max_rows",
                 "rows up to which the small-row kernel beat the GEMM for cpu.product_dtype weights (optional)"},
                {"cpu.product_tables",
                 "per dtype timed: the fields above for host weights of that dtype, the kernel path the "
                 "products took, and call_seconds: [rows, seconds] one product call costs beside its bytes; "
                 "quantized: per bits and group size, the in-place compressed products' rates by rows and their "
                 "call_seconds; "
                 "row_length: elements of a W row in those products; short_row_rates: the same products over rows "
                 "of short_row_length elements, each product priced at its own row length between the two; "
                 "loaded_cache_attention (a host standing in for the GPU): its decode attention over a cache loaded "
                 "from its cpu or disk tier, bytes of K and V per second and seconds per call, per unit (a "
                 "sequence's kv head), per position (a unit's key) and per score (a query head at a position) "
                 "(optional; a plan in a dtype without a table prices no CPU products)"},
                {"stage_link.bandwidth", "bytes/s between consecutive pipeline stages (optional)"},
                {"stage_link.latency", "seconds per message between consecutive pipeline stages (optional)"},
                {"schedule.step_seconds",
                 "seconds each step (weight layer x gpu batch) costs beyond its work: dispatch and synchronisation "
                 "(optional)"},
                {"compression", "bytes of dense fp16 data per second"},
                {"capacity", "bytes"}};
  j["gpu_is_host"] = p.gpu_is_host;
  for (const auto& f : number_fields()) j[f.group][f.key] = p.*f.member;
  j["cpu"]["threads"] = p.cpu_threads;
  json scaling = json::array();
  for (const auto& [threads, speedup] : p.cpu_thread_scaling) scaling.push_back({threads, speedup});
  j["cpu"]["thread_scaling"] = scaling;
  for (const auto& [key, value] : optional_cpu_fields(p)) {
    if (*value > 0) j["cpu"][key] = *value;
  }
  if (!p.cpu_product_rates.empty()) j["cpu"]["product_rates"] = rates_json(p.cpu_product_rates);
  if (p.times_cpu_products_per_dtype()) {
    json tables = json::array();
    for (const auto& t : p.cpu_product_tables) tables.push_back(product_table_json(t));
    j["cpu"]["product_tables"] = tables;
  }
  if (!p.cpu_product_dtype.empty()) j["cpu"]["product_dtype"] = p.cpu_product_dtype;
  if (p.cpu_small_matmul_max_rows != 0) j["cpu"]["small_matmul_max_rows"] = p.cpu_small_matmul_max_rows;
  if (p.stage_link_bandwidth > 0) {
    j["stage_link"]["bandwidth"] = p.stage_link_bandwidth;
    if (p.stage_link_latency > 0) j["stage_link"]["latency"] = p.stage_link_latency;
  }
  if (p.step_seconds > 0) j["schedule"]["step_seconds"] = p.step_seconds;
  j["capacity"] = {{"gpu", p.gpu_memory}, {"cpu", p.cpu_memory}, {"disk", p.disk_memory}};
  return j;
}

HardwareProfile profile_from_json(const json& j, const std::string& source) {
  TG_CHECK(j.is_object(), "{}: a hardware profile must be a JSON object", source);
  check_keys(j, {"name", "source", "units", "gpu_is_host", "bandwidth", "gpu_flops", "cpu", "compression", "capacity",
                 "stage_link", "schedule"},
             "", source);
  HardwareProfile p;
  p.path = source;
  p.name = j.value("name", std::string());
  p.source = j.value("source", std::string());
  p.gpu_is_host = j.value("gpu_is_host", false);
  const char* groups[] = {"bandwidth", "gpu_flops", "cpu", "compression"};
  std::set<std::string> known[4];
  for (const auto& f : number_fields()) {
    const json& group = group_of(j, f.group, source);
    p.*f.member = number_at(group, std::string(f.group) + "." + f.key, source);
    for (int g = 0; g < 4; ++g) {
      if (std::string(groups[g]) == f.group) known[g].insert(f.key);
    }
  }
  known[2].insert(
      {"threads", "thread_scaling", "product_rates", "product_dtype", "small_matmul_max_rows", "product_tables"});
  for (const auto& [key, value] : optional_cpu_fields(p)) {
    known[2].insert(key);
    if (j.at("cpu").contains(key)) *value = number_at(j.at("cpu"), std::string("cpu.") + key, source);
  }
  for (int g = 0; g < 4; ++g) check_keys(j.at(groups[g]), known[g], std::string(groups[g]) + ".", source);
  read_thread_scaling(p, j.at("cpu"), source);
  read_product_rates(p, j.at("cpu"), source);
  read_small_row_limit(p, j.at("cpu"), source);
  read_product_tables(p, j.at("cpu"), source);
  read_stage_link(p, j, source);
  read_schedule_costs(p, j, source);
  read_capacities(p, j, source);
  p.validate(source);
  return p;
}

HardwareProfile load_profile(const std::string& path) {
  std::ifstream in(path);
  TG_CHECK(in.good(), "{}: cannot open hardware profile", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    TG_THROW("{}: invalid JSON in hardware profile: {}", path, e.what());
  }
  return profile_from_json(j, path);
}

void save_profile(const HardwareProfile& profile, const std::string& path) {
  profile.validate(path);
  std::ofstream out(path);
  TG_CHECK(out.good(), "{}: cannot write hardware profile", path);
  out << profile_to_json(profile).dump(2) << "\n";
  TG_CHECK(out.good(), "{}: writing the hardware profile failed", path);
}

std::vector<std::string> builtin_profile_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : builtin_profile_texts()) names.push_back(name);
  return names;
}

std::optional<HardwareProfile> builtin_profile(const std::string& name) {
  for (const auto& [stem, text] : builtin_profile_texts()) {
    if (stem == name) return profile_from_json(json::parse(text), "built-in:" + stem);
  }
  return std::nullopt;
}

std::string cached_profile_path() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/') {
    return std::string(xdg) + "/tiergen/hw-profile.json";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/tiergen/hw-profile.json";
  }
  return "";
}

const char* profile_origin_name(ProfileOrigin origin) {
  switch (origin) {
    case ProfileOrigin::Option: return "--hw";
    case ProfileOrigin::Environment: return "$TIERGEN_HW_PROFILE";
    case ProfileOrigin::HostCache: return "this host's cached profile";
    case ProfileOrigin::BuiltIn: return "built-in default";
  }
  return "?";
}

namespace {

// A file path, or the name of a built-in profile.
HardwareProfile load_named(const std::string& name_or_path) {
  std::error_code ec;
  const bool is_file = std::filesystem::exists(name_or_path, ec);
  if (auto builtin = builtin_profile(name_or_path); builtin && !is_file) return *builtin;
  TG_CHECK(is_file, "hardware profile '{}': no such file, and no built-in profile has that name (built-ins: {}; "
           "`tiergen profile --out FILE` measures this host)", name_or_path, fmt::join(builtin_profile_names(), ", "));
  return load_profile(name_or_path);
}

}  // namespace

ResolvedProfile resolve_profile_with_origin(const std::string& hw_option) {
  ResolvedProfile r;
  const char* env = std::getenv("TIERGEN_HW_PROFILE");
  if (!hw_option.empty()) {
    r = {load_named(hw_option), ProfileOrigin::Option};
  } else if (env != nullptr && *env != '\0') {
    r = {load_named(env), ProfileOrigin::Environment};
  } else {
    const std::string cached = cached_profile_path();
    std::error_code ec;
    if (!cached.empty() && std::filesystem::exists(cached, ec)) {
      try {
        r = {load_profile(cached), ProfileOrigin::HostCache};
      } catch (const Error& e) {
        spdlog::warn("ignoring the cached hardware profile: {}", e.what());
        r = {*builtin_profile(kDefaultBuiltinProfile), ProfileOrigin::BuiltIn};
      }
    } else {
      r = {*builtin_profile(kDefaultBuiltinProfile), ProfileOrigin::BuiltIn};
    }
  }
  spdlog::info("hardware profile: {} ({})", r.profile.path, profile_origin_name(r.origin));
  return r;
}

HardwareProfile resolve_profile(const std::string& hw_option) { return resolve_profile_with_origin(hw_option).profile; }

}  // namespace tiergen::policy
