// `tiergen policy`: the dry run. Picks the placement, batch shape, compression,
// attention placement and threads for a model and workload on this hardware profile,
// prints them with predicted times and peak memory, and optionally writes the policy
// file that `generate` and `bench` accept. No weights are read.
#include <spdlog/spdlog.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "policy/report.h"
#include "policy/search.h"
#include "src/cli/command.h"
#include "tiergen/common/bytes.h"
#include "tiergen/common/error.h"
#include "tiergen/model/presets.h"

namespace tiergen::cli {

namespace {

struct PolicyOptions {
  std::string model;
  int64_t prompt_len = 0;
  int64_t gen_len = 0;
  std::string gpu_mem, cpu_mem, disk_mem;
  std::string hw;
  std::string compress = "auto";
  bool no_cpu_attention = false;
  std::string json_path;
};

uint64_t budget_or(const std::string& text, uint64_t fallback, const char* what) {
  return text.empty() ? fallback : parse_bytes(text, what);
}

void run_policy(const PolicyOptions& o) {
  const model::Spec spec = model::resolve_spec(o.model);
  const policy::HardwareProfile hw = policy::resolve_profile(o.hw);
  const runtime::Workload workload{o.prompt_len, o.gen_len};
  const runtime::Budgets budgets{budget_or(o.gpu_mem, hw.gpu_memory, "--gpu-mem"),
                                 budget_or(o.cpu_mem, hw.cpu_memory, "--cpu-mem"),
                                 budget_or(o.disk_mem, hw.disk_memory, "--disk-mem")};
  policy::SearchOptions options;
  options.compression = policy::compression_mode_from_string(o.compress);
  options.allow_cpu_attention = !o.no_cpu_attention;
  const policy::SearchResult result = policy::search_policy(spec, workload, budgets, hw, options);
  const policy::ReportContext context{&spec, workload, budgets, &hw};
  std::cout << policy::format_report(result, context) << std::flush;
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    TG_CHECK(out.good(), "{}: cannot write the policy file", o.json_path);
    out << policy::report_json(result, context).dump(2) << "\n";
    TG_CHECK(out.good(), "{}: writing the policy file failed", o.json_path);
    spdlog::info("policy written to {}", o.json_path);
  }
}

void setup_policy_command(CLI::App& app) {
  auto options = std::make_shared<PolicyOptions>();
  CLI::App* cmd = app.add_subcommand(
      "policy", "Dry run: choose placement, batch sizes, compression, CPU attention and threads; print predictions");
  cmd->add_option("--model", options->model, "Preset name (e.g. opt-30b) or model directory with config.json")
      ->required();
  cmd->add_option("--prompt-len", options->prompt_len, "Prompt length s (tokens)")->required()->check(CLI::PositiveNumber);
  cmd->add_option("--gen-len", options->gen_len, "Tokens to generate n")->required()->check(CLI::PositiveNumber);
  cmd->add_option("--gpu-mem", options->gpu_mem, "GPU memory budget (e.g. 16GiB); default: the profile's capacity");
  cmd->add_option("--cpu-mem", options->cpu_mem, "CPU memory budget; default: the profile's capacity");
  cmd->add_option("--disk-mem", options->disk_mem, "Disk budget; default: the profile's capacity");
  cmd->add_option("--hw", options->hw,
                  "Hardware profile JSON (default: $TIERGEN_HW_PROFILE, else configs/hw/t4-flexgen.json)");
  cmd->add_option("--compress", options->compress, "4-bit group-wise compression: auto, on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->add_flag("--no-cpu-attention", options->no_cpu_attention, "Never compute decode attention on the CPU");
  cmd->add_option("--json", options->json_path, "Write the policy file (with predictions) here");
  cmd->callback([options] { run_policy(*options); });
}

}  // namespace

TIERGEN_REGISTER_COMMAND("policy", setup_policy_command);

}  // namespace tiergen::cli
