#include "src/cli/number_checks.h"
#include "src/cli/engine_flags.h"
#include "src/cli/hf_cache.h"

#include <spdlog/spdlog.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "kernels/cpu/small_matmul.h"
#include "tiergen/common/bytes.h"
#include "tiergen/common/error.h"
#include "policy/search.h"
#include "src/cli/flexgen_flags.h"
#include "src/cli/host_profile.h"
#include "src/cli/stage_policy.h"
#include "src/cli/suggest.h"
#include "tiergen/runtime/default_budgets.h"
#include "tiergen/runtime/host_memory.h"
#include "tiergen/model/presets.h"

namespace tiergen::cli {

void add_engine_flags(CLI::App* c, EngineFlags& f, int64_t default_batch_size, UnplacedDefault unplaced) {
  const bool searched = unplaced == UnplacedDefault::Searched;
  c->add_option("-m,--model", f.model, "Model directory (config.json + safetensors) or preset (opt-30b, facebook/opt-30b, "
                "llama-3-8b, ...; `tiergen list-presets`); required unless --path names a checkpoint directory");
  c->add_flag("--dummy", f.dummy, "Use seeded random weights instead of a checkpoint (throughput runs; implied for presets)");
  c->add_option("--dummy-seed", f.dummy_seed, "Seed of the dummy weights");
  c->add_option("--device", f.device, "auto, cpu, cuda or cuda:N; with cpu, host memory stands in for the GPU tier")
      ->capture_default_str();
  c->add_option("--dtype", f.dtype, "Compute dtype: auto (float16 on cuda, float32 on cpu), float32, float16, bfloat16")
      ->capture_default_str();
  c->add_option("--gpu-mem", f.gpu_mem, "GPU tier budget, e.g. 16GiB (default: the device's free memory after a warm-up, less a reserve of 2.5 GiB + 1/64; with --device cpu, 20% of "
              "the RAM the process does not already use)");
  c->add_option("--cpu-mem", f.cpu_mem, "CPU tier budget (default: 80% of the RAM the process does not already use, less a --device cpu gpu tier)");
  c->add_option("--disk-mem", f.disk_mem, "Disk tier budget (default: free space under --offload-dir)");
  c->add_option("--offload-dir", f.offload_dir, "Directory for the disk tier's file (the file never outlives the run; directories the run creates "
                "are removed after it)")->capture_default_str();
  c->add_option("--io-threads", f.io_threads, "Disk I/O threads")->capture_default_str()->check(CLI::Range(1, 256));
  c->add_option("--trace", f.trace, "Write a Chrome trace (chrome://tracing, ui.perfetto.dev) of every load, store, "
                "compute and CPU attention task with its token, layer and gpu batch: times on the device's streams "
                "on CUDA, host times on the CPU; `tools/trace-summary.py` tabulates one token of it");
  auto* policy = c->add_option("--policy", f.policy_file,
                               std::string("Policy JSON (FlexGen's field names; `tiergen policy --json` writes "
                                           "one), or 'auto' to search one with the cost model for the budgets") +
                                   (searched ? " (the default without --percent; it never compresses unless asked)" : ""));
  c->add_option("--hw", f.hw, "Hardware profile JSON for --policy auto and the predicted-vs-measured report "
                "or built-in name (default: $TIERGEN_HW_PROFILE, else this host's profile cached by `tiergen profile "
                "--cache`, measured on first need)");
  c->add_option("--percent", f.percent, std::string("FlexGen placement: wg wc cg cc hg hc (weights, KV cache, "
                                                    "activations on gpu/cpu; disk gets the rest)") +
                                            (searched ? "; default: a plan searched for the job" : "; default 100 0 100 0 100 0"))
      ->expected(6)->excludes(policy);
  c->add_option("-b,--gpu-batch-size,--batch-size", f.gpu_batch_size,
                fmt::format("Sequences per gpu batch (default {}); overrides a --policy file's, and a search plans for it",
                            searched ? fmt::format("the searched plan's, {} with --percent", default_batch_size)
                                     : std::to_string(default_batch_size)))
      ->check(positive());
  c->add_option("--num-gpu-batches", f.num_gpu_batches,
                searched ? "Gpu batches per block (default: the searched plan's, 1 with --percent)"
                         : "Gpu batches per block (default 1)")
      ->check(positive());
  c->add_flag("--cpu-attention,--cpu-cache-compute", f.cpu_attention, "Decode attention on the CPU where the KV cache lives there");
  c->add_flag("--cpu-gemm", f.cpu_gemm,
              "CPU products above the small-row limit (16 rows by default; prefill, large batches) on LibTorch's GEMM: up to 1.5x faster "
              "there, but a sequence's last bits (its log-probabilities, rarely a near-tie token) then depend on how "
              "many rows share its products; by default every CPU product is batch-invariant (compressed weights: "
              "in place in decode, dequantized in prefill, at any rows; with this flag, in place up to 8 rows)");
  c->add_option("--compress", f.compress,
                "What --policy auto may choose: off (never compress: outputs stay exact), auto (4-bit compression "
                "where the cost model predicts a gain; tokens may change) or on")
      ->check(CLI::IsMember({"off", "auto", "on"}))->capture_default_str();
  c->add_flag("--no-guardrails", f.no_guardrails,
              "A searched plan is the LP's own, not weighed against the FlexGen-shaped guardrail policies (to compare; "
              "as `tiergen policy --no-guardrails`)");
  add_policy_field_flags(c, f.fields);
  add_flexgen_flags(c, f);
  add_launch_flags(c, f.launch);
}

void add_launch_flags(CLI::App* c, dist::LaunchFlags& launch) {
  c->add_option("--world-size", launch.world_size, "Processes in a pipeline job, one per stage (default: the "
                "launcher's WORLD_SIZE or OMPI_COMM_WORLD_SIZE, else 1)")->check(positive());
  c->add_option("--rank", launch.rank, "This process's stage, 0 to --world-size - 1 (default: RANK or "
                "OMPI_COMM_WORLD_RANK)")->check(non_negative());
  c->add_option("--dist-init", launch.init, "Rendezvous of a pipeline job: file:PATH (one host; the file must not "
                "exist before the job) or tcp://HOST:PORT (rank 0 serves it); default: MASTER_ADDR and MASTER_PORT");
  c->add_option("--dist-timeout", launch.timeout_seconds, "Seconds a rank waits for another before the job fails")
      ->capture_default_str()->check(positive());
}

// "facebook/opt-125m" that is no local folder: its snapshot in the Hugging Face cache,
// when one was downloaded there.
void resolve_hub_id(EngineFlags& f) {
  std::error_code ec;
  if (f.dummy || std::filesystem::is_directory(f.model, ec) || !looks_like_hub_id(f.model)) return;
  if (const auto snapshot = find_in_hugging_face_cache(f.model)) {
    spdlog::info("--model {}: the Hugging Face cache's snapshot {}", f.model, *snapshot);
    f.model = *snapshot;
  }
}

void prepare_engine_flags(EngineFlags& f) {
  kernels::set_small_matmul_for_every_row_count(!f.cpu_gemm);
  resolve_flexgen_path(f);
  resolve_hub_id(f);
  apply_flexgen_verbosity(f);
  if (!f.trace.empty()) {
    // Refused before the run, not after it.
    const std::filesystem::path dir = std::filesystem::absolute(f.trace).parent_path();
    TG_CHECK(std::filesystem::is_directory(dir), "--trace {}: the directory {} does not exist", f.trace, dir.string());
    TG_CHECK(::access(dir.c_str(), W_OK) == 0, "--trace {}: the directory {} is not writable", f.trace, dir.string());
  }
}

void require_checkpoint_or_dummy(const EngineFlags& f) {
  std::error_code ec;
  if (f.dummy || std::filesystem::is_directory(f.model, ec)) return;
  const std::string where = looks_like_hub_id(f.model)
                                ? fmt::format(" and is not in the Hugging Face cache ({})", hugging_face_hub_dir())
                                : "";
  TG_THROW("--model '{}' is a preset, not a checkpoint{}: its weights would be random. Give a model directory "
           "(config.json, *.safetensors, tokenizer.json; e.g. `huggingface-cli download {} --local-dir DIR`), or "
           "--dummy to run on random weights for throughput", f.model, where,
           looks_like_hub_id(f.model) ? f.model : "facebook/opt-125m");
}

model::Spec load_spec(const EngineFlags& f) {
  if (!std::filesystem::is_directory(f.model) && !model::find_preset(f.model)) {
    // Neither a directory nor a preset: name the presets, and the closest ones first.
    std::vector<std::string> names = model::preset_names();
    std::string known;
    for (const auto& n : model::preset_names()) {
      known += (known.empty() ? "" : ", ") + n;
      if (const auto preset = model::find_preset(n); preset && !preset->hf_id.empty()) names.push_back(preset->hf_id);
    }
    const std::string cache = looks_like_hub_id(f.model)
                                  ? fmt::format(", and is not in the Hugging Face cache ({})", hugging_face_hub_dir())
                                  : "";
    TG_THROW("--model '{}' is neither a model directory (with config.json) nor a preset{}{}; presets: {}", f.model,
             cache, did_you_mean(f.model, names), known);
  }
  return model::resolve_spec(f.model);
}

std::unique_ptr<model::WeightSource> load_weights(const EngineFlags& f, const model::Spec& spec) {
  if (f.dummy || !std::filesystem::is_directory(f.model)) {
    // Loud: random weights make every token meaningless; only throughput is measured.
    spdlog::warn("DUMMY WEIGHTS: '{}' runs on seeded random weights (seed {}){}: throughput only, the tokens mean "
                 "nothing", f.model, f.dummy_seed, f.dummy ? "" : ", as a preset name without a checkpoint");
    return model::make_dummy_weights(f.dummy_seed);
  }
  return model::open_checkpoint_weights(f.model, spec);
}

// Whether the model a policy file names is this job's: the same name or folder, or a
// preset of the same shape (a plan made on "opt-13b" for a checkpoint of OPT-13B).
bool same_model(const std::string& planned, const model::Spec& spec) {
  if (planned == spec.name) return true;
  std::error_code ec;
  const auto canonical = [&](const std::string& p) { return std::filesystem::weakly_canonical(p, ec).string(); };
  if (std::filesystem::is_directory(planned, ec) && canonical(planned) == canonical(spec.name)) return true;
  const auto preset = model::find_preset(planned);
  return preset && preset->vocab_size == spec.vocab_size && preset->hidden_size == spec.hidden_size &&
         preset->intermediate_size == spec.intermediate_size && preset->num_layers == spec.num_layers &&
         preset->num_heads == spec.num_heads && preset->num_kv_heads == spec.num_kv_heads;
}

// A policy file saved by `tiergen policy --json` (JSON `j`) names the model and job it
// was planned for; run for another model or longer sequences, its placement may not fit
// or may be far from the best, which the user should hear before the run rather than infer.
void warn_if_planned_for_another_job(const std::string& path, const nlohmann::json& j, const model::Spec& spec,
                                     const runtime::Workload& workload) {
  if (j.contains("model") && j["model"].is_string() && !same_model(j["model"].get<std::string>(), spec)) {
    spdlog::warn("--policy {}: planned for model {}, this job runs {}: the placement may not fit or be far from the "
                 "best (`tiergen policy` plans this one)", path, j["model"].get<std::string>(), spec.name);
  }
  const nlohmann::json planned = j.value("workload", nlohmann::json());
  if (!planned.is_object() || !planned.value("prompt_len", nlohmann::json()).is_number_integer() ||
      !planned.value("gen_len", nlohmann::json()).is_number_integer()) {
    return;
  }
  const int64_t prompt = planned["prompt_len"].get<int64_t>(), gen = planned["gen_len"].get<int64_t>();
  if (prompt != workload.prompt_len || gen != workload.gen_len) {
    spdlog::warn("--policy {}: planned for prompt {} and gen {}, this job has prompt {} and gen {}{}", path, prompt,
                 gen, workload.prompt_len, workload.gen_len,
                 workload.prompt_len + workload.gen_len > prompt + gen
                     ? ": its KV cache is larger than planned, and the placement may not fit"
                     : "");
  }
}

void plan_for_block_shape(int64_t gpu_batch_size, int64_t num_gpu_batches, policy::SearchOptions& search) {
  if (gpu_batch_size <= 0 && num_gpu_batches <= 0) return;
  runtime::Policy shape;  // refused as a policy would be (a block too large to count, first)
  if (gpu_batch_size > 0) shape.gpu_batch_size = gpu_batch_size;
  if (num_gpu_batches > 0) shape.num_gpu_batches = num_gpu_batches;
  shape.validate();
  if (gpu_batch_size > 0) search.gpu_batch_sizes = {gpu_batch_size};
  if (num_gpu_batches > 0) search.num_gpu_batches = num_gpu_batches;
}

bool placement_is_searched(const EngineFlags& f, UnplacedDefault unplaced) {
  return f.policy_file == "auto" || (unplaced == UnplacedDefault::Searched && f.policy_file.empty() && f.percent.empty());
}

namespace {

// What make_policy's search plans for: the dtype, what it may compress, whether it may
// multiply weights where they live, a block shape given by flags.
policy::SearchOptions search_options(const EngineFlags& f, const runtime::EngineOptions& options) {
  policy::SearchOptions search;
  search.dtype_bytes = options.device.dtype_bytes();
  search.compression = policy::compression_mode_from_string(f.compress);
  // --policy auto with a compression flag searches the compressed plans; the default
  // search plans exactly, and the flags compress its plan (refine_by_flags).
  if (f.policy_file == "auto" && f.fields.compresses()) {
    search.compression = policy::CompressionMode::On;
  }
  // A fixed --cpu-weight-compute is applied by refine_by_flags; the search plans without it.
  search.allow_cpu_weight_compute = !f.fields.fix_cpu_weight_compute();
  // A block shape given by flags is the one planned for (not forced over another plan).
  plan_for_block_shape(f.gpu_batch_size, f.num_gpu_batches, search);
  search.guardrails = !f.no_guardrails;
  return search;
}

// Explicit flags refine every policy, a policy file's and a searched one's too.
void refine_by_flags(const EngineFlags& f, runtime::Policy& p) {
  if (f.gpu_batch_size > 0) p.gpu_batch_size = f.gpu_batch_size;
  if (f.num_gpu_batches > 0) p.num_gpu_batches = f.num_gpu_batches;
  if (f.cpu_attention) p.cpu_cache_compute = true;
  apply_policy_field_flags(f.fields, p, /*apply_compression=*/f.policy_file != "auto");
  check_flexgen_attention_sparsity(f);
  p.validate();
}

}  // namespace

runtime::Policy make_policy(const EngineFlags& f, int64_t default_batch_size, const model::Spec& spec,
                            const runtime::Workload& workload, const runtime::EngineOptions& options,
                            UnplacedDefault unplaced, std::optional<policy::HardwareProfile>* planned_on) {
  runtime::Policy p;
  TG_CHECK(f.compress == "off" || f.policy_file == "auto",
           "--compress {} applies to --policy auto (add --policy auto to let the search compress); otherwise use "
           "--compress-weight/--compress-cache",
           f.compress);
  TG_CHECK(!f.no_guardrails || placement_is_searched(f, unplaced),
           "--no-guardrails applies to a searched plan (--policy auto); this run's policy is given");
  if (placement_is_searched(f, unplaced)) {
    const policy::SearchOptions search = search_options(f, options);
    const policy::HardwareProfile hw = profile_for_planning(f.hw, compat::dtype_name(options.device.dtype));
    if (planned_on) *planned_on = hw;
    p = options.link ? search_this_stage(spec, workload, options.budgets, hw, search, *options.link).policy
                     : policy::search_policy(spec, workload, options.budgets, hw, search).policy;
  } else if (!f.policy_file.empty()) {
    const nlohmann::json file = runtime::read_policy_file(f.policy_file);
    p = runtime::policy_from_json(file, f.policy_file);
    warn_if_planned_for_another_job(f.policy_file, file, spec, workload);
  } else {
    p.gpu_batch_size = default_batch_size;
    if (!f.percent.empty()) {
      p.w_gpu_percent = f.percent[0];
      p.w_cpu_percent = f.percent[1];
      p.cache_gpu_percent = f.percent[2];
      p.cache_cpu_percent = f.percent[3];
      p.act_gpu_percent = f.percent[4];
      p.act_cpu_percent = f.percent[5];
    }
    p.cpu_cache_compute = f.cpu_attention;
  }
  refine_by_flags(f, p);
  spdlog::info("{}", p.exactness());
  return p;
}

runtime::Policy search_policy_again(const EngineFlags& f, const model::Spec& spec, const runtime::Workload& workload,
                                    const runtime::EngineOptions& options, const policy::HardwareProfile& hw,
                                    const runtime::Policy& current, bool placement_only) {
  policy::SearchOptions search = search_options(f, options);
  // Lossy choices stay as they are: a search that may compress (--policy auto
  // --compress auto) now plans only the current plan's kind.
  if (f.policy_file == "auto") {
    search.compression = current.exact() ? policy::CompressionMode::Off : policy::CompressionMode::On;
  }
  if (placement_only) {
    search.gpu_batch_sizes = {current.gpu_batch_size};
    search.num_gpu_batches = current.num_gpu_batches;
    if (!current.cpu_cache_compute) search.allow_cpu_attention = false;
    if (!current.cpu_weight_compute_prefill && !current.cpu_weight_compute_decode) {
      search.allow_cpu_weight_compute = false;
    }
  }
  runtime::Policy p = policy::search_policy(spec, workload, options.budgets, hw, search).policy;
  refine_by_flags(f, p);
  if (placement_only) p.threads = current.threads;  // a GEMM's sums may follow its threads
  return p;
}

runtime::DeviceContext make_device(const EngineFlags& f) {
  std::string dtype = f.dtype;
  if (dtype == "auto") {
    const bool cuda = f.device != "cpu" && runtime::cuda_available();
    dtype = cuda ? "float16" : "float32";
  }
  runtime::DeviceContext device = runtime::make_device_context(f.device, dtype, /*pin_host=*/true);
  // Said once, where the device is made: what every later line's "gpu" means.
  spdlog::info("device: {}{}; compute dtype {}{}", device.compute.str(),
               device.is_cuda() ? "" : " (host memory stands in for the GPU tier)", dtype,
               f.dtype == "auto" ? " (--dtype auto)" : "");
  return device;
}

namespace {

uint64_t free_disk_bytes(const std::string& dir) {
  std::error_code ec;
  std::filesystem::path p = dir;
  while (!p.empty() && !std::filesystem::exists(p, ec)) p = p.parent_path();
  struct statvfs s {};
  if (p.empty() || ::statvfs(p.c_str(), &s) != 0) return 0;
  return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
}

}  // namespace

runtime::Budgets make_budgets(const EngineFlags& f, const runtime::DeviceContext& device, int local_ranks) {
  const auto share = static_cast<uint64_t>(std::max(1, local_ranks));
  // The device is warmed up only when its free memory sizes the default gpu tier.
  const bool measure_device = device.is_cuda() && f.gpu_mem.empty();
  const runtime::HostMemory host{runtime::physical_memory_bytes() / share, runtime::process_rss_bytes(),
                                 measure_device ? runtime::measure_cuda_free_memory(device) : std::nullopt};
  const runtime::Budgets b = runtime::resolve_budgets(
      {f.gpu_mem, f.cpu_mem, f.disk_mem, free_disk_bytes(f.offload_dir) / share}, device.is_cuda(), host);
  if (host.device_free) {
    const runtime::DeviceFreeMemory& d = *host.device_free;
    spdlog::info("CUDA device: {} free once its context existed; the warm-up kept {} (cuBLAS workspaces, kernels), "
                 "leaving {}; the gpu tier leaves {} of that to the allocator and kernels loaded later",
                 format_bytes(d.at_start), format_bytes(d.warmup_bytes()), format_bytes(d.after_warmup),
                 format_bytes(runtime::cuda_reserve_bytes(d.after_warmup)));
  }
  if (share > 1) {
    spdlog::info("{} ranks on this host: default host budgets are this rank's 1/{} of its RAM and free disk", share, share);
  }
  spdlog::info("budgets: gpu {}{}, cpu {}{}, disk {}{}; RAM {}, of which this process already uses {} (outside the "
               "tiers)", format_bytes(b.gpu), f.gpu_mem.empty() ? (device.is_cuda() ? " (device free - reserve)" : " (default)") : "",
               format_bytes(b.cpu), f.cpu_mem.empty() ? " (default)" : "", format_bytes(b.disk),
               f.disk_mem.empty() ? " (free space)" : "", format_bytes(host.ram), format_bytes(host.process_overhead));
  if (const auto fs = runtime::ram_backed_filesystem(f.offload_dir)) {
    spdlog::warn("--offload-dir {} is on {}: the disk tier would live in RAM, beside the gpu and cpu tiers; point it at "
                 "a disk-backed directory", f.offload_dir, *fs);
  }
  return b;
}

std::string cuda_allocator_report(uint64_t peak_reserved, uint64_t gpu_tier_peak, uint64_t gpu_tier_budget) {
  const uint64_t unseen = peak_reserved > gpu_tier_peak ? peak_reserved - gpu_tier_peak : 0;
  return fmt::format("CUDA allocator: peak reserved {}; the gpu tier's peak {} of its {} budget; {} beyond the tier "
                     "(allocator rounding, per-stream pools, workspaces)",
                     format_bytes(peak_reserved), format_bytes(gpu_tier_peak), format_bytes(gpu_tier_budget),
                     format_bytes(unseen));
}

namespace {

// Ranks of one host each take their own GPU (cuda:LOCAL_RANK), as torchrun and
// mpirun users expect, unless --device names one.
std::string rank_device(const std::string& device, const dist::Launch& launch) {
  if (!launch.distributed() || launch.local_world_size < 2) return device;
  if (device == "cuda" || (device == "auto" && runtime::cuda_available())) return fmt::format("cuda:{}", launch.local_rank);
  return device;
}

}  // namespace

runtime::EngineOptions make_engine_options(const EngineFlags& f) {
  runtime::EngineOptions o;
  const dist::Launch launch = dist::resolve_launch(f.launch);
  if (launch.distributed()) {
    spdlog::set_pattern(fmt::format("[%H:%M:%S.%e] [rank {}/{}] [%^%l%$] %v", launch.rank, launch.world_size));
  }
  EngineFlags on_this_rank = f;
  on_this_rank.device = rank_device(f.device, launch);
  o.device = make_device(on_this_rank);
  o.budgets = make_budgets(on_this_rank, o.device, launch.local_world_size);
  o.offload_dir = f.offload_dir;
  o.io_threads = f.io_threads;
  o.keep_trace = !f.trace.empty();
  if (launch.distributed()) o.link = dist::connect(launch);
  return o;
}

}  // namespace tiergen::cli
