// `tiergen policy`: the dry run. Picks the placement, batch shape, compression,
// attention placement and threads for a model and workload, prints the bytes each tier
// will hold (the runtime's own placement), predicted times, and the LP's fractions,
// and optionally writes the policy file that `generate` and `bench` accept. No weights
// are read. With --device it sizes and budgets everything exactly as `generate` would.
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "policy/pipeline_report.h"
#include "policy/report.h"
#include "policy/search.h"
#include "src/cli/number_checks.h"
#include "src/cli/command.h"
#include "src/cli/engine_flags.h"
#include "src/cli/host_profile.h"
#include "src/cli/policy_field_flags.h"
#include "tiergen/common/torch_compat.h"
#include "tiergen/common/bytes.h"
#include "tiergen/common/error.h"
#include "tiergen/io/prompts.h"
#include "tiergen/model/presets.h"
#include "tiergen/runtime/default_budgets.h"
#include "tiergen/tokenizer/tokenizer.h"

namespace tiergen::cli {

namespace {

struct PolicyOptions {
  std::string model;
  std::string prompts, tokenizer;
  int64_t num_prompts = 0;
  int64_t prompt_len = 0;
  int64_t gen_len = 0;
  std::string device, dtype = "auto";
  std::string gpu_mem, cpu_mem, disk_mem;
  std::string offload_dir = "/tmp/tiergen-offload";
  std::string hw;
  std::string compress = "off";
  bool no_cpu_attention = false;
  bool no_cpu_weight_compute = false;
  bool no_guardrails = false;
  // A policy to price instead of searching: a file, FlexGen's flags, or both (flags refine the file).
  std::string policy_file;
  std::vector<double> percent;
  int64_t gpu_batch_size = 0, num_gpu_batches = 0;
  bool cpu_attention = false;
  PolicyFieldFlags fields;  // as generate takes them: CPU weight compute, overlap, compression
  std::string json_path;
  int64_t stages = 1;
  double link_gbytes = 0;  // GB/s between pipeline stages; 0: the profile's, else kAssumedLinkGBytes
};

// Without --link-bandwidth or a measured stage link in the profile: 10 Gbit/s Ethernet.
constexpr double kAssumedLinkGBytes = 1.25;

// --link-bandwidth, else the profile's measured stage link, else the assumption; the
// report says which.
policy::StageLinkRate stage_link_rate(const PolicyOptions& o, const policy::HardwareProfile& hw) {
  if (o.link_gbytes > 0) return {o.link_gbytes * 1e9, 0.0, "given by --link-bandwidth"};
  if (hw.stage_link_bandwidth > 0) {
    return {hw.stage_link_bandwidth, hw.stage_link_latency, fmt::format("measured, {}", hw.path)};
  }
  return {kAssumedLinkGBytes * 1e9, 0.0,
          "assumed: 10 Gbit/s; measure it with `tiergen profile --link` or give --link-bandwidth"};
}

// The workload of a prompts file: how many prompts, the longest after tokenization, and
// the most tokens any of them asks for (its max_tokens, else --gen-len).
runtime::Workload workload_of_file(const PolicyOptions& o, const model::Spec& spec) {
  const auto records = io::read_prompts(o.prompts, io::parse_prompt_format("auto"));
  std::unique_ptr<tokenizer::Tokenizer> tok;
  const std::string tok_dir = !o.tokenizer.empty() ? o.tokenizer : o.model;
  runtime::Workload w{0, 0, 0};
  TG_CHECK(!records.empty(), "{}: no prompts", o.prompts);
  for (const auto& p : records) {
    if (p.text && !tok) {
      TG_CHECK(std::filesystem::is_directory(tok_dir) && tokenizer::Tokenizer::exists_in(tok_dir),
               "{}:{}: text prompt but no tokenizer: give --tokenizer DIR (or a model directory with one)", o.prompts,
               p.line);
      tok = tokenizer::Tokenizer::load(tok_dir);
    }
    const auto length = [&](const std::optional<std::string>& text, const std::vector<int64_t>& ids) {
      return text ? tok->encode_tail(*text, /*add_special_tokens=*/true, /*keep=*/0).total : static_cast<int64_t>(ids.size());
    };
    w.prompt_len = std::max(w.prompt_len, length(p.text, p.token_ids));
    for (const auto& more : p.more_prompts) w.prompt_len = std::max(w.prompt_len, length(more.text, more.token_ids));
    w.gen_len = std::max(w.gen_len, p.overrides.max_tokens.value_or(o.gen_len));
    // Each prompt of a list, and each of its n samples, is a sequence of the job.
    w.num_sequences += (1 + static_cast<int64_t>(p.more_prompts.size())) * p.overrides.n.value_or(1);
  }
  TG_CHECK(w.prompt_len + w.gen_len <= spec.max_positions, "{}: the longest prompt ({} tokens) plus {} new tokens "
           "exceeds the model's {} positions", o.prompts, w.prompt_len, w.gen_len, spec.max_positions);
  return w;
}

runtime::Workload workload_of(const PolicyOptions& o, const model::Spec& spec) {
  if (!o.prompts.empty()) return workload_of_file(o, spec);
  TG_CHECK(o.prompt_len > 0, "give --prompts FILE, or --prompt-len (with --gen-len and optionally --num-prompts)");
  // The check generate makes before anything else: no plan for a job the model cannot run.
  TG_CHECK(o.prompt_len + o.gen_len <= spec.max_positions,
           "--prompt-len {} plus --gen-len {} exceeds {}'s {} positions", o.prompt_len, o.gen_len, spec.name,
           spec.max_positions);
  return {o.prompt_len, o.gen_len, o.num_prompts};
}

// What `generate --device D --dtype T` would use: the device's dtype, and the budgets
// with the same defaults.
struct Target {
  int dtype_bytes = 2;
  runtime::Budgets budgets;
  policy::HardwareProfile hw;
};

int dtype_bytes_of(const std::string& dtype) {
  if (dtype == "float32") return 4;
  TG_CHECK(dtype == "auto" || dtype == "float16" || dtype == "bfloat16",
           "--dtype must be auto, float32, float16 or bfloat16, got '{}'", dtype);
  return 2;
}

Target target_of(const PolicyOptions& o) {
  Target t;
  if (!o.device.empty()) {
    EngineFlags flags;
    flags.device = o.device;
    flags.dtype = o.dtype;
    flags.gpu_mem = o.gpu_mem;
    flags.cpu_mem = o.cpu_mem;
    flags.disk_mem = o.disk_mem;
    flags.offload_dir = o.offload_dir;
    const runtime::DeviceContext device = make_device(flags);
    t.dtype_bytes = device.dtype_bytes();
    t.budgets = make_budgets(flags, device);
    t.hw = profile_for_planning(o.hw, compat::dtype_name(device.dtype));
    return t;
  }
  // No device: a plan for the profile's machine, with its capacities as default budgets.
  t.dtype_bytes = dtype_bytes_of(o.dtype);
  const policy::ResolvedProfile resolved = policy::resolve_profile_with_origin(o.hw);
  // The dtype `generate` on that machine would compute in (--dtype auto: fp32 on a CPU
  // stand-in, fp16 on a GPU).
  const std::string dtype = o.dtype != "auto" ? o.dtype : resolved.profile.gpu_is_host ? "float32" : "float16";
  t.hw = profile_priced_in(resolved, dtype);
  if (t.hw.gpu_is_host) {
    // A plan for a profile measured without a GPU is a plan for the CPU stand-in: say
    // so, since a user asking for a GPU plan here would otherwise read it as one.
    spdlog::warn("planning for '{}', a machine without a GPU: host memory stands in for the GPU tier and the CPU "
                 "computes (as --device cpu runs); for a GPU machine give --hw with its profile (`tiergen profile` "
                 "there) or a built-in one ({})", t.hw.name, fmt::join(policy::builtin_profile_names(), ", "));
  }
  auto budget_or = [](const std::string& text, uint64_t fallback, const char* flag) {
    return text.empty() ? fallback : runtime::parse_budget(text, flag);
  };
  t.budgets = {budget_or(o.gpu_mem, t.hw.gpu_memory, "--gpu-mem"), budget_or(o.cpu_mem, t.hw.cpu_memory, "--cpu-mem"),
               budget_or(o.disk_mem, t.hw.disk_memory, "--disk-mem")};
  return t;
}

void write_policy_file(const std::string& path, const policy::SearchResult& result,
                       const policy::ReportContext& context) {
  std::ofstream out(path);
  TG_CHECK(out.good(), "{}: cannot write the policy file", path);
  out << policy::report_json(result, context).dump(2) << "\n";
  TG_CHECK(out.good(), "{}: writing the policy file failed", path);
  spdlog::info("policy written to {}", path);
}

// --stages N: each stage's policy for its slice, and the pipeline's throughput. With
// --json PATH, stage R's policy goes to PATH with .stageR before its extension.
void run_pipeline_policy(const PolicyOptions& o, const model::Spec& spec, const runtime::Workload& workload,
                         const Target& target, const policy::SearchOptions& options,
                         const policy::ReportContext& context) {
  const policy::PipelinePlan plan = policy::plan_pipeline(spec, workload, target.budgets, target.hw, options, o.stages,
                                                          stage_link_rate(o, target.hw));
  std::optional<policy::SearchResult> single;
  try {
    single = policy::search_policy(spec, workload, target.budgets, target.hw, options);
  } catch (const InfeasibleError&) {
  }
  std::cout << policy::format_pipeline_report(plan, context, single) << std::flush;
  if (o.json_path.empty()) return;
  const std::filesystem::path path = o.json_path;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    std::filesystem::path stage_path = path;
    stage_path.replace_filename(fmt::format("{}.stage{}{}", path.stem().string(), s, path.extension().string()));
    policy::ReportContext stage_context = context;
    const model::Spec slice = policy::stage_slice(spec, plan.stages[s].layers);
    stage_context.spec = &slice;
    write_policy_file(stage_path.string(), plan.stages[s].search, stage_context);
  }
}

// A policy file, a placement or CPU attention give a policy to price; -b and
// --num-gpu-batches alone fix the block shape the search plans for, as in `generate`.
bool gives_policy(const PolicyOptions& o) {
  return !o.policy_file.empty() || !o.percent.empty() || o.cpu_attention;
}

// The policy the flags give: the file's (else the defaults: all on the gpu, 1 x 1), with
// FlexGen's flags over it, as `generate` reads them with --percent or --policy FILE.
runtime::Policy given_policy(const PolicyOptions& o) {
  runtime::Policy p = o.policy_file.empty() ? runtime::Policy{} : runtime::policy_from_file(o.policy_file);
  if (!o.percent.empty()) {
    TG_CHECK(o.percent.size() == 6, "--percent takes six numbers (weights, KV cache, activations on gpu and cpu), "
             "got {}", o.percent.size());
    p.w_gpu_percent = o.percent[0], p.w_cpu_percent = o.percent[1];
    p.cache_gpu_percent = o.percent[2], p.cache_cpu_percent = o.percent[3];
    p.act_gpu_percent = o.percent[4], p.act_cpu_percent = o.percent[5];
  }
  if (o.gpu_batch_size > 0) p.gpu_batch_size = o.gpu_batch_size;
  if (o.num_gpu_batches > 0) p.num_gpu_batches = o.num_gpu_batches;
  if (o.cpu_attention) p.cpu_cache_compute = true;
  apply_policy_field_flags(o.fields, p, /*apply_compression=*/true);
  p.validate();
  return p;
}

// A policy field flag sets a field of a given policy, and --compress lets the search
// compress: each is refused where it would do nothing, never ignored.
void check_policy_field_flags(const PolicyOptions& o) {
  if (gives_policy(o)) {
    TG_CHECK(o.compress == "off", "--compress {} applies to the search; a given policy compresses by "
             "--compress-weight/--compress-cache", o.compress);
    return;
  }
  const std::string flag = o.fields.first_given();
  TG_CHECK(flag.empty(), "{} sets a field of a given policy (--percent, --policy FILE or --cpu-attention); a "
           "search chooses its plan whole: --compress on lets it compress, --no-cpu-weight-compute keeps the CPU "
           "from multiplying weights", flag);
}

// Prices the given policy with the same model the search uses, refuses one that does
// not fit the budgets, and sets it beside what --policy auto would choose for the job.
void price_given_policy(const PolicyOptions& o, const model::Spec& spec, const runtime::Workload& workload,
                        const Target& target, const policy::SearchOptions& options,
                        const policy::ReportContext& context) {
  policy::SearchResult given;
  given.policy = given_policy(o);
  // As the engine runs it: a job of fewer sequences than the block gets a smaller block.
  if (workload.num_sequences > 0 && workload.num_sequences < given.policy.block_size()) {
    given.policy = given.policy.fitted_to(workload.num_sequences);
  }
  given.memory = runtime::plan_memory(spec, given.policy, workload, target.dtype_bytes);
  const std::string over = given.memory.over_budget(target.budgets);
  TG_CHECK(over.empty(), "the given policy ({}) does not fit the budgets: {}", given.policy.describe(), over);
  given.prediction = policy::predict(spec, given.policy, workload, target.hw, target.dtype_bytes);
  given.chosen_by = "given";
  std::cout << policy::format_report(given, context);
  try {
    const policy::SearchResult searched = policy::search_policy(spec, workload, target.budgets, target.hw, options);
    // Both priced at default threads, as the given policy is (the search's report
    // prices its plan at the threads it chose).
    runtime::Policy at_default_threads = searched.policy;
    at_default_threads.threads = {};
    const double auto_throughput =
        policy::predict(spec, at_default_threads, workload, target.hw, target.dtype_bytes).total_throughput;
    std::cout << fmt::format("--policy auto for this job: {}; predicted {:.3f} token/s, {:.2f}x the given policy "
                             "(both at default threads)\n",
                             searched.policy.describe(), auto_throughput,
                             auto_throughput / given.prediction.total_throughput);
  } catch (const InfeasibleError& e) {
    std::cout << "--policy auto for this job: no plan (" << e.what() << ")\n";
  }
  std::cout << std::flush;
  if (!o.json_path.empty()) write_policy_file(o.json_path, given, context);
}

void run_policy(const PolicyOptions& o) {
  const model::Spec spec = model::resolve_spec(o.model);
  const runtime::Workload workload = workload_of(o, spec);
  check_policy_field_flags(o);
  const Target target = target_of(o);
  policy::SearchOptions options;
  options.compression = policy::compression_mode_from_string(o.compress);
  options.allow_cpu_attention = !o.no_cpu_attention;
  options.allow_cpu_weight_compute = !o.no_cpu_weight_compute;
  options.guardrails = !o.no_guardrails;
  options.dtype_bytes = target.dtype_bytes;
  const policy::ReportContext context{&spec, workload, target.budgets, &target.hw, target.dtype_bytes};
  if (!gives_policy(o)) plan_for_block_shape(o.gpu_batch_size, o.num_gpu_batches, options);
  if (o.stages > 1) {
    TG_CHECK(!gives_policy(o) && o.gpu_batch_size <= 0 && o.num_gpu_batches <= 0,
             "--stages plans each stage's policy: it takes no --policy, --percent or batch flags");
    run_pipeline_policy(o, spec, workload, target, options, context);
    return;
  }
  if (gives_policy(o)) {
    price_given_policy(o, spec, workload, target, options, context);
    return;
  }
  const policy::SearchResult result = policy::search_policy(spec, workload, target.budgets, target.hw, options);
  std::cout << policy::format_report(result, context) << std::flush;
  if (!o.json_path.empty()) write_policy_file(o.json_path, result, context);
}

void setup_policy_command(CLI::App& app) {
  auto o = std::make_shared<PolicyOptions>();
  CLI::App* cmd = app.add_subcommand(
      "policy", "Dry run: choose placement, batch sizes, compression, CPU attention and threads; print predictions");
  cmd->add_option("-m,--model", o->model, "Preset name (e.g. opt-30b) or model directory with config.json")->required();
  auto* prompts = cmd->add_option("--prompts", o->prompts,
                                  "Plan for this prompt file (as `generate -p` takes it): its number of prompts, "
                                  "their tokenized lengths and max_tokens");
  cmd->add_option("--tokenizer", o->tokenizer, "Tokenizer directory for text prompts (default: the model directory)")
      ->needs(prompts);
  cmd->add_option("--num-prompts", o->num_prompts, "Number of prompts of the job (default: unbounded)")
      ->check(positive())->excludes(prompts);
  cmd->add_option("-s,--prompt-len", o->prompt_len, "Prompt length s (tokens)")->check(positive())
      ->excludes(prompts);
  cmd->add_option("-n,--gen-len", o->gen_len, "Tokens to generate n (with --prompts: for prompts without max_tokens)")
      ->default_val(32)->check(positive());
  cmd->add_option("--device", o->device,
                  "Plan for this device as `generate --device` runs it: cpu, cuda, cuda:N or auto (its dtype and "
                  "default budgets; default: the hardware profile's machine)");
  cmd->add_option("--dtype", o->dtype, "Compute dtype as `generate --dtype`: auto, float32, float16, bfloat16")
      ->capture_default_str();
  cmd->add_option("--gpu-mem", o->gpu_mem, "GPU memory budget (e.g. 16GiB); default: as generate with --device, "
                  "else the profile's capacity");
  cmd->add_option("--cpu-mem", o->cpu_mem, "CPU memory budget; default: as generate with --device, else the profile's");
  cmd->add_option("--disk-mem", o->disk_mem, "Disk budget; default: as generate with --device, else the profile's");
  cmd->add_option("--offload-dir", o->offload_dir, "Disk tier directory (for the --device disk default)")
      ->capture_default_str();
  cmd->add_option("--hw", o->hw, "Hardware profile JSON or built-in name (default: $TIERGEN_HW_PROFILE, else this "
                  "host's cached profile, else the built-in t4-flexgen)");
  cmd->add_option("--compress", o->compress,
                  "What the search may compress, 4-bit groups: off (default: outputs stay exact), auto (when "
                  "predicted faster; tokens may change) or on. A given policy compresses by --compress-weight/"
                  "--compress-cache")
      ->check(CLI::IsMember({"auto", "on", "off"}))->capture_default_str();
  cmd->add_flag("--no-cpu-attention", o->no_cpu_attention, "Never compute decode attention on the CPU");
  cmd->add_flag("--no-cpu-weight-compute", o->no_cpu_weight_compute,
                "Never multiply host-resident weights on the CPU (considered only when the hardware profile has "
                "cpu.product_rates, or cpu.matmul_flops and cpu.gemv_bandwidth)");
  cmd->add_flag("--no-guardrails", o->no_guardrails,
                "Take the LP's plan without pricing the FlexGen-shaped guardrail policies beside it (to compare)");
  cmd->add_option("--policy", o->policy_file, "Price this policy file instead of searching (as `generate --policy` "
                  "takes it; the flags below refine it)");
  cmd->add_option("--percent", o->percent, "Price this FlexGen placement instead of searching: wg wc cg cc hg hc")
      ->expected(6);
  cmd->add_option("-b,--gpu-batch-size", o->gpu_batch_size, "The gpu batch size: of a given policy, else the one "
                  "the search plans for")
      ->check(positive());
  cmd->add_option("--num-gpu-batches", o->num_gpu_batches, "Gpu batches per block: of a given policy, else the "
                  "number the search plans for")
      ->check(positive());
  cmd->add_flag("--cpu-attention,--cpu-cache-compute", o->cpu_attention,
                "With a given policy: decode attention on the CPU where the KV cache lives");
  add_policy_field_flags(cmd, o->fields);
  cmd->add_option("--json", o->json_path, "Write the policy file (with predictions) here; with --stages, one per "
                  "stage, named PATH with .stageR before the extension");
  cmd->add_option("--stages", o->stages, "Plan a pipeline of N processes (one per stage, each with the budgets "
                  "given): each stage's policy and the predicted pipeline throughput")
      ->capture_default_str()->check(positive());
  cmd->add_option("--link-bandwidth", o->link_gbytes, "GB/s between consecutive pipeline stages (for --stages; "
                  "default: the hardware profile's measured stage_link, else 1.25)")
      ->check(positive());
  cmd->callback([o] { run_policy(*o); });
}

}  // namespace

TIERGEN_REGISTER_COMMAND("policy", setup_policy_command);

}  // namespace tiergen::cli
