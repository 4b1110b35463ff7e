// `tiergen bench`: FlexGen's synthetic workload. N = gpu_batch_size × num_gpu_batches
// (× ranks on a pipeline, or --num-prompts) random prompts (seeded token ids) of
// exactly S tokens each generate exactly n tokens (EOS ignored); one warm-up run, then
// R measured runs on the same engine (with --policy auto over several blocks, a settling
// run between them first fits the plan to this host: first_block_replan.h). Prints
// FlexGen's report lines for the median run, the policy, predicted versus measured
// times and mean ± sd over the runs; --json writes all of it as one record, and
// --format json|csv|md prints it on stdout in that form instead of the text report.
// FlexGen's own flags are accepted as flex_opt.py spells them (flexgen_flags.h).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "policy/report.h"
#include "src/cli/number_checks.h"
#include "src/cli/bench_report.h"
#include "src/cli/command.h"
#include "src/cli/engine_flags.h"
#include "src/cli/first_block_replan.h"
#include "src/cli/flexgen_flags.h"
#include "src/cli/host_profile.h"
#include "src/cli/pipeline_ranks.h"
#include "src/cli/prediction_report.h"
#include "src/cli/progress.h"
#include "tiergen/common/bytes.h"
#include "tiergen/common/error.h"
#include "tiergen/common/torch_compat.h"
#include "tiergen/runtime/disk_tier.h"
#include "tiergen/runtime/host_memory.h"
#include "tiergen/runtime/stage.h"

namespace tiergen::cli {

namespace {

struct BenchFlags {
  EngineFlags engine;
  int64_t prompt_len = 512, gen_len = 32;
  int64_t repetitions = 3, warmup = 1;
  int64_t num_prompts = 0;  // 0: one block (per rank, on a pipeline), FlexGen's workload
  uint64_t seed = 0;
  std::string json;
  std::string format = "text";  // of the report on stdout: text, json, csv or md
  int64_t cut_gen_len = 0;      // FlexGen's; 0: not given
  std::string log_file;         // FlexGen's: the report lines appended to this file
  bool no_log = false;
  bool quiet = false;
  bool no_replan = false;  // keep a searched plan for every block (first_block_replan.h)
};

// FlexGen's log file name for --log-file auto (flex_opt.py get_filename + ".log").
std::string flexgen_log_name(const BenchFlags& f, const runtime::Policy& p) {
  const std::string& model = f.engine.model;
  std::string name = fmt::format("fo-{}-gbs{}-ngbs{}-prompt{}-gen{}-percent-", model.substr(model.rfind('-') + 1),
                                 p.gpu_batch_size, p.num_gpu_batches, f.prompt_len, f.gen_len);
  for (double v : {p.w_gpu_percent, p.w_cpu_percent, p.cache_gpu_percent, p.cache_cpu_percent, p.act_gpu_percent,
                   p.act_cpu_percent}) {
    name += fmt::format("{}-", v);
  }
  name += p.cpu_cache_compute ? "cpu-cache" : "gpu-cache";
  if (p.compress_weight.enabled) name += "-compw";
  if (p.compress_cache.enabled) name += "-compc";
  return name + ".log";
}

// FlexGen's write_benchmark_log: the report lines appended to the log file.
void append_flexgen_log(const std::string& path, const std::string& report) {
  std::ofstream out(path, std::ios::app);
  TG_CHECK(out.good(), "--log-file {}: cannot open for appending", path);
  out << report;
  TG_CHECK(out.good(), "--log-file {}: write failed", path);
  spdlog::info("report lines appended to {}", path);
}

// N prompts of exactly `prompt_len` seeded ids, avoiding the special tokens.
std::vector<runtime::SequenceRequest> make_requests(const model::Spec& spec, int64_t num_prompts, int64_t run_len,
                                                    const BenchFlags& f) {
  std::mt19937_64 rng(f.seed);
  const int64_t low = std::min<int64_t>(4, spec.vocab_size - 1);
  std::uniform_int_distribution<int64_t> token(low, spec.vocab_size - 1);
  std::vector<runtime::SequenceRequest> requests;
  for (int64_t i = 0; i < num_prompts; ++i) {
    runtime::SequenceRequest r;
    r.index = i;
    r.prompt.resize(static_cast<size_t>(f.prompt_len));
    for (auto& id : r.prompt) id = token(rng);
    r.max_new_tokens = run_len;
    r.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  return requests;
}

// The command line as the user typed it (for the JSON record and bench/RESULTS.md).
std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), out;
  for (char c : all) out += c == '\0' ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {0};
  return ::gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string();
}

// The workload as the ranks of a pipeline must share it: every rank makes the same
// seeded prompts and runs the same warm-up and measured runs, each run a job of all
// the ranks together.
nlohmann::ordered_json bench_job(const BenchFlags& f, const model::Spec& spec, const runtime::DeviceContext& device) {
  return {{"model_shape", model_shape(spec)},
          {"dummy_weights", f.engine.dummy ? fmt::format("seed {}", f.engine.dummy_seed) : "no"},
          {"prompt_len", f.prompt_len},
          {"gen_len", f.gen_len},
          {"cut_gen_len", f.cut_gen_len},
          {"seed", f.seed},
          {"warmup", f.warmup},
          {"repetitions", f.repetitions},
          {"num_prompts", f.num_prompts},
          {"compute_dtype", compat::dtype_name(device.dtype)}};
}

// A rank other than the last measures its own stage's passes (waits for its
// neighbours included) and says so; the last rank reports the pipeline's throughput.
void log_stage_runs(const runtime::StageLink& link, const std::string& stage, const std::vector<StatsSnapshot>& runs) {
  const MetricSummaries metrics = MetricSummaries::of(runs);
  spdlog::info("stage {} of {} ({}): {} measured runs, median {:.3f} s in its passes ({:.3f} s prefill, {:.3f} s "
               "decode); the last rank reports the pipeline's throughput", link.rank(), link.world_size(), stage,
               runs.size(), metrics.total_latency.median, metrics.prefill_latency.median,
               metrics.decode_latency.median);
}

std::string pipeline_report_line(const runtime::StageLink& link, const std::string& stage, double median_wall,
                                 bool projected) {
  return fmt::format("pipeline of {} ranks: the times are those of the last stage's passes ({}), its waits for the "
                     "others included (median {}run {:.3f} s from start to end); the peak memory is its own\n",
                     link.world_size(), stage, projected ? "cut " : "", median_wall);
}

// The report's runs beside the warm-up and measured ones, and its line on how the plan
// settled (both empty without a settling run).
std::string settling_runs_text(const std::optional<ReplannedJob>& settled, int64_t warmup) {
  if (!settled) return "";
  if (!settled->decision.replanned) return "1 settling + ";
  return fmt::format("1 settling + {} warm-up on the settled plan + ", warmup);
}

std::string settled_plan_line(const std::optional<ReplannedJob>& settled) {
  if (!settled) return "";
  if (!settled->decision.replanned) {
    return fmt::format("plan settled on the settling run's first block: {}\n", settled->decision.reason);
  }
  return fmt::format("plan settled on the settling run's first block, which ran on {}: {}\n",
                     settled->first_plan.describe(), settled->decision.reason);
}

void run_bench(BenchFlags& f) {
  prepare_engine_flags(f.engine);
  TG_CHECK(f.prompt_len > 0 && f.gen_len > 0, "--prompt-len and --gen-len must be positive");
  // --cut-gen-len: FlexGen's shortened run, its decode time projected to --gen-len.
  const int64_t run_len = f.cut_gen_len > 0 ? std::min(f.cut_gen_len, f.gen_len) : f.gen_len;
  const bool projected = run_len < f.gen_len;
  TG_CHECK(!projected || run_len >= 2, "--cut-gen-len {}: at least 2 tokens are needed to project decode time (one "
           "decode step)", f.cut_gen_len);
  if (projected) {
    spdlog::warn("--cut-gen-len {}: each run generates {} of --gen-len {} tokens per prompt; decode latency and "
                 "throughput are projected (mean decode step x {} steps), as FlexGen does, not measured",
                 f.cut_gen_len, run_len, f.gen_len, f.gen_len - 1);
  }
  TG_CHECK(f.repetitions > 0, "-r/--repetitions must be at least 1");
  const model::Spec spec = load_spec(f.engine);
  TG_CHECK(f.prompt_len + f.gen_len <= spec.max_positions,
           "prompt length {} plus {} new tokens exceeds the model's {} positions", f.prompt_len, f.gen_len,
           spec.max_positions);
  // --num-prompts sizes the job (and what --policy auto plans for); without it, a block.
  const runtime::Workload workload{f.prompt_len, f.gen_len, f.num_prompts};
  // On a pipeline (--world-size, torchrun's or MPI's environment) every rank runs
  // its stage of each run; the last one, which samples, reports.
  const runtime::EngineOptions options = make_engine_options(f.engine);
  runtime::StageLink* link = options.link.get();
  const AbortPipelineOnFailure abort_on_failure{link};
  if (link) check_ranks_agree(*link, "bench", bench_job(f, spec, options.device));
  std::optional<policy::HardwareProfile> planned_on;  // the profile a searched plan was priced on
  runtime::Policy policy = make_policy(f.engine, 4, spec, workload, options, UnplacedDefault::AllOnGpu, &planned_on);
  if (link) check_ranks_agree_on_block_shape(*link, policy);
  const bool reports = link == nullptr || link->is_last();
  // A pipeline keeps a block in flight per stage (FlexGen's ring: gpu batch size x
  // gpu batches x ranks prompts), else a stage would wait for the others' blocks.
  const int64_t one_block_each = policy.block_size() * (link ? link->world_size() : 1);
  const int64_t num_prompts = f.num_prompts > 0 ? f.num_prompts : one_block_each;
  const int dtype_bytes = options.device.dtype_bytes();
  spdlog::info("policy: {}", policy.describe());
  runtime::install_interrupt_handlers("\ntiergen: interrupted\n");

  const auto weights = load_weights(f.engine, spec);
  const auto placing = std::chrono::steady_clock::now();
  std::optional<runtime::Engine> engine(std::in_place, spec, *weights, policy, options, workload);
  const double placement_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - placing).count();
  // This rank's layers, as the engine split them (split_stages is a pure function).
  const std::string stage =
      link ? runtime::split_stages(spec, link->world_size())[static_cast<size_t>(link->rank())].describe(spec) : "";
  const auto requests = make_requests(spec, num_prompts, run_len, f);
  // A searched plan for a job of several blocks settles as `generate`'s does, in one run
  // more after the warm-up runs: its first block runs on the plan, the profile is
  // fitted to what that block measured, and the rest of the run, and the measured runs,
  // take the plan the fitted profile picks when it wins by more than its band. After
  // the warm-up, so that the fit is of a warm run where there is one (a process's first
  // run also pays for first touches). A new plan's engine is warmed up again before it
  // is measured.
  const bool settles = !link && planned_on &&
                       job_replans(placement_is_searched(f.engine, UnplacedDefault::AllOnGpu), f.no_replan,
                                   requests.size(), policy, replan_scope(options.device, policy));
  // The bar counts every run, warm-up included: each generates exactly N·n tokens.
  const int64_t total_runs = (settles ? 1 : 0) + f.warmup + f.repetitions;
  ProgressOptions bar_options;
  bar_options.item_name = "runs";
  ProgressBar progress(total_runs, total_runs * num_prompts * run_len,
                       reports && !f.quiet && ProgressBar::stderr_is_terminal(), bar_options);
  std::optional<std::string> failure;  // the first sequence the model could not compute
  const auto on_result = [&](size_t, const runtime::SequenceResult& r) {
    if (r.error && !failure) failure = *r.error;
    progress.end_sequence(static_cast<int64_t>(r.tokens.size()), run_len);
  };
  const auto on_token = [&](size_t, int64_t) { progress.add_token(); };

  for (int64_t w = 0; w < f.warmup; ++w) {
    spdlog::info("warm-up run {}/{}", w + 1, f.warmup);
    engine->generate(requests, on_result, on_token);
    TG_CHECK(!failure, "warm-up run {}: a sequence failed: {}", w + 1, failure.value_or(""));
    progress.end_item();
  }
  std::optional<ReplannedJob> settled;
  if (settles) {
    spdlog::info("settling run (after {} warm-up run{}): the first block calibrates the searched plan", f.warmup,
                 f.warmup == 1 ? "" : "s");
    engine->clear_stats();  // the fit reads the first block alone, not the warm-up runs
    engine->clear_trace();
    ReplanContext context{f.engine, spec, options, *weights, *planned_on, workload, placement_seconds, f.repetitions};
    context.when_unrecoverable = "the benchmark stops";
    settled = run_with_replan(context, requests, engine, policy, on_result, on_token);
    TG_CHECK(!failure, "the settling run: a sequence failed: {}", failure.value_or(""));
    progress.end_item();
    // The rebuilt engine ran only the rest of the settling run (perhaps at another
    // block size): warm it as the first one was.
    const int64_t rewarm = settled->decision.replanned ? f.warmup : 0;
    for (int64_t w = 0; w < rewarm; ++w) {
      spdlog::info("warm-up run {}/{} on the settled plan", w + 1, f.warmup);
      engine->generate(requests, on_result, on_token);
      TG_CHECK(!failure, "warm-up run {} on the settled plan: a sequence failed: {}", w + 1, failure.value_or(""));
    }
  }
  std::vector<StatsSnapshot> runs;
  std::vector<double> wall_seconds;  // each measured run's, start to end of its generate call
  StatsSnapshot measured_sum;
  for (int64_t r = 0; r < f.repetitions; ++r) {
    if (r + 1 == f.repetitions) engine->clear_trace();  // the trace shows the last measured run
    const StatsSnapshot before = StatsSnapshot::of(engine->stats());
    const auto start = std::chrono::steady_clock::now();
    engine->generate(requests, on_result, on_token);
    wall_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    progress.end_item();
    runs.push_back(StatsSnapshot::of(engine->stats()) - before);
    TG_CHECK(!failure, "run {}: a sequence failed: {}", r + 1, failure.value_or(""));
    // A pipeline's other stages retire the same sequences but never hold their tokens.
    TG_CHECK(runs.back().sequences == num_prompts && (!reports || runs.back().generated_tokens == num_prompts * run_len),
             "internal: run {} finished {} sequences with {} tokens, expected {} with {}", r + 1, runs.back().sequences,
             runs.back().generated_tokens, num_prompts, num_prompts * run_len);
    if (projected) runs.back() = runs.back().projected(num_prompts, run_len, f.gen_len);
    const auto& run = runs.back();
    if (reports) {
      spdlog::info("run {}/{}: total latency {:.3f} s, total throughput {:.3f} token/s", r + 1, f.repetitions,
                   run.total_seconds(), run.total_throughput());
    } else {
      spdlog::info("run {}/{}: {:.3f} s in this stage's passes, {:.3f} s in all", r + 1, f.repetitions,
                   run.total_seconds(), wall_seconds.back());
    }
    measured_sum += run;
  }
  progress.finish();
  if (!f.engine.trace.empty()) {
    const std::string path = rank_trace_path(f.engine.trace, link);
    engine->write_trace(path);
    spdlog::info("trace of every task in the last measured run: {}", path);
  }
  if (!reports) {
    log_stage_runs(*link, stage, runs);
    return;
  }

  const BenchSizes sizes = bench_sizes(spec, num_prompts, f.prompt_len, f.gen_len, dtype_bytes);
  const MetricSummaries metrics = MetricSummaries::of(runs);
  const runtime::TierBytes& peak = engine->stats().peak_bytes;
  runtime::Stats measured;  // all measured runs together, for the per-task comparison
  measured_sum.fill(measured);
  measured.peak_bytes = peak;
  // The runs are done: a missing or unusable profile only drops the prediction. The
  // prediction is of one process running the whole model (`tiergen policy --stages N`
  // predicts a pipeline).
  const auto profile = link ? std::optional<policy::HardwareProfile>() : profile_for_prediction(f.engine.hw, compat::dtype_name(options.device.dtype));
  std::optional<policy::Prediction> predicted;
  if (profile) predicted = policy::predict(spec, policy, workload, *profile, dtype_bytes);
  // Each run executes its prompts' blocks (a partial last one priced as a whole block).
  const int64_t blocks_per_run = (num_prompts + policy.block_size() - 1) / policy.block_size();
  const PredictionScale scale{spec.num_layers, f.gen_len, f.repetitions * blocks_per_run};
  const std::string device = options.device.compute.str();
  const std::string dtype = options.device.dtype == at::kHalf       ? "float16"
                            : options.device.dtype == at::kBFloat16 ? "bfloat16"
                            : options.device.dtype == at::kFloat    ? "float32"
                                                                    : c10::toString(options.device.dtype);

  const std::optional<uint64_t> cuda_reserved = runtime::cuda_peak_reserved_bytes(options.device);
  std::ostringstream text;
  text << fmt::format("tiergen bench: {} ({}), prompt len {}, gen len {}{}, {} prompts ({} x {}{}), {} {}, "
                      "{} warm-up + {}{} measured runs\n",
                      spec.name, model::family_name(spec.family), f.prompt_len, f.gen_len,
                      projected ? fmt::format(" (runs cut to {}: decode projected)", run_len) : "", num_prompts,
                      policy.gpu_batch_size, policy.num_gpu_batches,
                      (link ? fmt::format(" x {} ranks", link->world_size()) : "") +
                          (num_prompts != policy.block_size() * (link ? link->world_size() : 1)
                               ? fmt::format(", blocks of {}", policy.block_size())
                               : ""),
                      device, dtype, f.warmup, settling_runs_text(settled, f.warmup), f.repetitions)
            << "policy: " << policy.describe() << "\n"
            << settled_plan_line(settled)
            << (link ? pipeline_report_line(*link, stage, summarize(wall_seconds).median, projected) : "")
            << policy.exactness() << "\n"
            << flexgen_report(sizes, peak[runtime::Tier::Gpu], metrics, projected)
            << fmt::format("peak memory: gpu {}, cpu {}, disk {}\n", format_bytes(peak[runtime::Tier::Gpu]),
                           format_bytes(peak[runtime::Tier::Cpu]), format_bytes(peak[runtime::Tier::Disk]))
            << (cuda_reserved ? cuda_allocator_report(*cuda_reserved, peak[runtime::Tier::Gpu], options.budgets.gpu) + "\n"
                              : "")
            << repetition_report(metrics, runs.size())
            << (predicted ? predicted_vs_measured(*predicted, measured, scale)
                : link    ? "predicted vs measured: skipped (a pipeline; tiergen policy --stages N predicts one)\n"
                          : "predicted vs measured: skipped (no hardware profile of this host)\n");

  {
    nlohmann::json runs_json = nlohmann::json::array();
    for (size_t r = 0; r < runs.size(); ++r) {
      runs_json.push_back(runs[r].to_json());
      runs_json.back()["wall_s"] = wall_seconds[r];
    }
    nlohmann::json j = {
        {"tool", "tiergen"},
        {"date", utc_now()},
        {"host", host_name()},
        {"command", command_line()},
        {"model", spec.name},
        {"hf_id", spec.hf_id},
        {"family", model::family_name(spec.family)},
        {"device", device},
        {"dtype", dtype},
        {"prompt_len", f.prompt_len},
        {"gen_len", f.gen_len},
        {"num_prompts", num_prompts},
        {"gpu_batch_size", policy.gpu_batch_size},
        {"num_gpu_batches", policy.num_gpu_batches},
        {"seed", f.seed},
        {"warmup_runs", f.warmup},
        {"repetitions", f.repetitions},
        {"total_tokens", num_prompts * f.gen_len},
        {"cut_gen_len", projected ? nlohmann::json(run_len) : nlohmann::json()},
        {"projected", projected},
        {"model_size_bytes", sizes.model_bytes},
        {"cache_size_bytes", sizes.cache_bytes},
        {"hidden_size_bytes", sizes.hidden_bytes},
        {"peak_gpu_mem_bytes", peak[runtime::Tier::Gpu]},
        {"peak_bytes", {{"gpu", peak[runtime::Tier::Gpu]}, {"cpu", peak[runtime::Tier::Cpu]}, {"disk", peak[runtime::Tier::Disk]}}},
        {"budget_bytes", {{"gpu", options.budgets.gpu}, {"cpu", options.budgets.cpu}, {"disk", options.budgets.disk}}},
        {"cuda_peak_reserved_bytes", cuda_reserved ? nlohmann::json(*cuda_reserved) : nlohmann::json()},
        {"pipeline", link ? nlohmann::json{{"ranks", link->world_size()}, {"reporting_rank", link->rank()},
                                           {"reporting_stage", stage}}
                          : nlohmann::json()},
        // FlexGen's report lines: medians over the measured runs.
        {"prefill_latency_s", metrics.prefill_latency.median},
        {"prefill_throughput", metrics.prefill_throughput.median},
        {"decode_latency_s", metrics.decode_latency.median},
        {"decode_throughput", metrics.decode_throughput.median},
        {"total_latency_s", metrics.total_latency.median},
        {"total_throughput", metrics.total_throughput.median},
        {"summary", metrics.to_json()},
        {"runs", runs_json},
        {"policy", runtime::policy_to_json(policy)},
        {"policy_description", policy.describe()},
        {"plan_class", policy::plan_class_json(policy)},
        {"exact", policy.exact()},
        {"prediction", predicted ? policy::prediction_to_json(*predicted) : nlohmann::json()},
        {"predicted_vs_measured", predicted ? predicted_vs_measured_json(*predicted, measured, scale)
                                            : measured_only_json(measured)}};
    if (settled) j["replan"] = replan_json(*settled);
    if (f.format == "text") std::cout << text.str();
    else std::cout << format_bench_record(j, f.format);
    std::cout.flush();
    if (!f.json.empty()) {
      std::ofstream out(f.json, std::ios::trunc);
      TG_CHECK(out.good(), "cannot write {}", f.json);
      out << j.dump(2) << "\n";
      TG_CHECK(out.good(), "failed writing {}", f.json);
    }
  }
  if (!f.no_log && !f.log_file.empty()) {
    append_flexgen_log(f.log_file == "auto" ? flexgen_log_name(f, policy) : f.log_file,
                       flexgen_report(sizes, peak[runtime::Tier::Gpu], metrics, projected));
  }
}

void setup_bench(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* c = app.add_subcommand(
      "bench", "FlexGen's synthetic throughput benchmark: random prompts of --prompt-len tokens, --gen-len tokens each");
  add_engine_flags(c, f->engine, 4, UnplacedDefault::AllOnGpu);
  c->add_option("-s,--prompt-len", f->prompt_len, "Prompt length S (every prompt has exactly S tokens)")
      ->capture_default_str()->check(positive());
  c->add_option("-n,--gen-len", f->gen_len, "Tokens generated per prompt (EOS is ignored)")
      ->capture_default_str()->check(positive());
  c->add_option("-r,--repetitions", f->repetitions, "Measured runs after the warm-up")->capture_default_str()
      ->check(positive());
  c->add_option("--num-prompts", f->num_prompts, "Prompts per run (default: one block, gpu batch size x gpu "
                "batches, FlexGen's workload; on a pipeline one block per rank); --policy auto plans for this many")
      ->check(positive());
  c->add_option("--warmup", f->warmup, "Warm-up runs before the measured ones")->capture_default_str()
      ->check(non_negative());
  c->add_option("--seed", f->seed, "Seed of the random prompt token ids")->capture_default_str();
  c->add_option("--json", f->json, "Write the report as one JSON record to this file");
  c->add_option("--format", f->format, "The report on stdout: text (FlexGen's lines and more), json (the --json "
                "record), csv (a header and one row) or md (a markdown table row)")
      ->check(CLI::IsMember({"text", "json", "csv", "md"}))->capture_default_str();
  c->add_flag("-q,--quiet", f->quiet, "No progress bar on stderr (it is drawn only when stderr is a terminal)");
  c->add_option("--cut-gen-len", f->cut_gen_len, "FlexGen's shortened run: generate this many tokens per prompt and "
                "project decode latency to --gen-len (reported as projected)")->check(positive());
  c->add_option("--log-file", f->log_file, "Append FlexGen's report lines to this file ('auto': FlexGen's file name "
                "for the run)");
  c->add_flag("--no-log", f->no_log, "Write no --log-file (FlexGen's flag)");
  c->add_flag("--no-replan", f->no_replan, "Measure the searched plan as searched (by default, with --policy auto "
              "and --num-prompts of several blocks, one settling run after the warm-up fits the hardware profile on "
              "its first block and the measured runs are of the plan it settles on, as `generate` re-plans a job)");
  c->callback([f] { run_bench(*f); });
}

}  // namespace

TIERGEN_REGISTER_COMMAND("bench", setup_bench);

}  // namespace tiergen::cli
