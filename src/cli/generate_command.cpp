// `tiergen generate`: prompts file in, results JSONL out, through the offloading engine.
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/cpu/small_matmul.h"
#include "src/cli/number_checks.h"
#include "src/cli/command.h"
#include "src/cli/engine_flags.h"
#include "src/cli/first_block_replan.h"
#include "src/cli/flexgen_flags.h"
#include "src/cli/generate_requests.h"
#include "src/cli/host_profile.h"
#include "src/cli/job_identity.h"
#include "src/cli/pipeline_ranks.h"
#include "src/cli/prediction_report.h"
#include "src/cli/progress.h"
#include "src/io/chat_template.h"
#include "tiergen/common/error.h"
#include "tiergen/common/torch_compat.h"
#include "tiergen/io/prompts.h"
#include "tiergen/io/results.h"
#include "tiergen/runtime/disk_tier.h"
#include "tiergen/runtime/host_memory.h"
#include "tiergen/tokenizer/tokenizer.h"

namespace tiergen::cli {

namespace {

struct GenerateFlags {
  EngineFlags engine;
  std::string prompts, out, format = "auto", output_format = "auto", tokenizer, chat_template, stats_json;
  std::vector<std::string> prompt_texts;  // --prompt TEXT (repeatable), instead of a file
  RequestDefaults defaults;
  int64_t max_failures = 0;
  std::vector<RefusedFlag> refused;
  bool resume = false, overwrite = false, quiet = false, report = false;
  bool retry_failed = false;  // with --resume: run the file's failed requests again
  bool no_replan = false;     // keep the searched plan for every block (first_block_replan.h)
};

// Below this, a job's fixed costs swamp what the cost model predicts.
constexpr double kShortestJobForRatios = 2.0;  // seconds

std::unique_ptr<tokenizer::Tokenizer> load_tokenizer(const GenerateFlags& f) {
  if (!f.tokenizer.empty()) return tokenizer::Tokenizer::load(f.tokenizer);
  if (std::filesystem::is_directory(f.engine.model) && tokenizer::Tokenizer::exists_in(f.engine.model)) {
    return tokenizer::Tokenizer::load(f.engine.model);
  }
  return nullptr;
}

std::string tokenizer_dir(const GenerateFlags& f) {
  if (!f.tokenizer.empty()) return f.tokenizer;
  return std::filesystem::is_directory(f.engine.model) ? f.engine.model : std::string();
}

constexpr int64_t kDefaultGpuBatchSize = 8;

// Where the prompts come from, as error messages name it: the file, or "--prompt".
std::string prompt_source(const GenerateFlags& f) { return f.prompt_texts.empty() ? f.prompts : "--prompt"; }

std::vector<io::PromptRecord> read_job_prompts(const GenerateFlags& f) {
  TG_CHECK(!f.prompts.empty() || !f.prompt_texts.empty(),
           "no prompts: pass -p/--prompts FILE (one prompt per line, or JSONL; - for stdin) or --prompt TEXT");
  if (!f.prompt_texts.empty()) return prompts_from_flags(f.prompt_texts);
  return io::read_prompts(f.prompts, io::parse_prompt_format(f.format));
}

// Results written over their own prompts would destroy the job's input.
void refuse_out_equal_to_prompts(const GenerateFlags& f) {
  if (f.out.empty() || f.out == "-" || f.prompts.empty() || f.prompts == "-") return;
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool same = fs::exists(f.out, ec) ? fs::equivalent(f.out, f.prompts, ec)
                                          : fs::weakly_canonical(f.out, ec) == fs::weakly_canonical(f.prompts, ec);
  TG_CHECK(!same, "-o {} is the prompt file itself; the results would overwrite the prompts. Choose another -o",
           f.out);
}

io::ResultFormat output_format(const GenerateFlags& f, const std::vector<io::PromptRecord>& prompts) {
  if (f.output_format != "auto") return io::parse_result_format(f.output_format);
  const bool openai = std::any_of(prompts.begin(), prompts.end(), [](const auto& p) { return p.openai; });
  return openai ? io::ResultFormat::OpenAi : io::ResultFormat::Tiergen;
}

// What produced a results file, so that --resume cannot mix two jobs' results.
nlohmann::ordered_json job_fingerprint(const GenerateFlags& f, const model::Spec& spec,
                                       const std::vector<io::PromptRecord>& prompts, io::ResultFormat format,
                                       const runtime::DeviceContext& device) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto& d = f.defaults;
  nlohmann::ordered_json j;
  j["prompts_hash"] = prompts_hash(prompts);
  j["model"] = fs::is_directory(f.engine.model, ec) ? fs::weakly_canonical(f.engine.model, ec).string() : f.engine.model;
  j["model_shape"] = model_shape(spec);
  j["dummy_weights"] = f.engine.dummy ? fmt::format("seed {}", f.engine.dummy_seed) : "no";
  if (!f.engine.dummy && fs::is_directory(f.engine.model, ec)) j["checkpoint"] = checkpoint_identity(f.engine.model);
  j["tokenizer"] = tokenizer_identity(tokenizer_dir(f));
  // Recorded where given (the config's template is part of the tokenizer's identity).
  if (!f.chat_template.empty()) j["chat_template"] = file_identity(f.chat_template);
  j["lossy"] = lossy_choices(f.engine);
  // What "auto" became here: a resume on another device must not mix fp16 and fp32 results.
  j["dtype"] = compat::dtype_name(device.dtype);
  // Recorded where products are not batch-invariant (--cpu-gemm, or a row limit set by
  // TIERGEN_SMALL_MATMUL_MAX_ROWS): a sequence's last bits then follow its batch.
  if (!kernels::small_matmul_for_every_row_count() || kernels::small_matmul_max_rows_setting() >= 0) {
    j["cpu_products"] = "gemm, not batch-invariant";
  }
  j["max_tokens"] = d.max_tokens;
  j["sampling"] = {{"temperature", d.temperature}, {"top_k", d.top_k}, {"top_p", d.top_p}, {"seed", d.seed},
                   {"n", d.n}, {"min_tokens", d.min_tokens}, {"stop", d.stop}, {"stop_token_ids", d.stop_token_ids},
                   {"ignore_eos", d.ignore_eos}, {"presence_penalty", d.presence_penalty},
                   {"frequency_penalty", d.frequency_penalty}, {"repetition_penalty", d.repetition_penalty},
                   {"logprobs", d.logprobs}, {"echo", d.echo}};
  // Recorded where set, so that results files written before these flags existed still
  // resume under the same defaults.
  if (d.min_p > 0) j["sampling"]["min_p"] = d.min_p;
  if (d.include_stop_str_in_output) j["sampling"]["include_stop_str_in_output"] = true;
  j["truncate"] = d.truncate;
  j["max_model_len"] = d.max_model_len;
  j["output_format"] = format == io::ResultFormat::OpenAi ? "openai" : "tiergen";
  return j;
}

// The job as the ranks must share it: its record, the model's path left out (it may
// differ from host to host).
nlohmann::ordered_json pipeline_job(nlohmann::ordered_json job) {
  job.erase("model");
  return job;
}

// Where a resumed job starts: the prompts already done, and of those the failed ones
// run again (--retry-failed). The last rank of a pipeline reads it from the results
// file and tells the others, as "DONE" or "DONE retry I,J,...".
struct ResumePoint {
  int64_t done = 0;
  std::vector<int64_t> retried;
};

std::string resume_point_text(const ResumePoint& r) {
  return r.retried.empty() ? std::to_string(r.done) : fmt::format("{} retry {}", r.done, fmt::join(r.retried, ","));
}

ResumePoint parse_resume_point(const std::string& text) {
  ResumePoint r;
  std::istringstream in(text);
  std::string word, list;
  TG_CHECK(in >> r.done, "internal: resume point \"{}\" from the last rank", text);
  if (in >> word >> list) {
    TG_CHECK(word == "retry", "internal: resume point \"{}\" from the last rank", text);
    std::istringstream items(list);
    for (std::string item; std::getline(items, item, ',');) {
      int64_t index = -1;
      std::istringstream number(item);
      TG_CHECK(number >> index && index >= 0 && index < r.done, "internal: resume point \"{}\" from the last rank",
               text);
      r.retried.push_back(index);
    }
  }
  return r;
}

// One request on its way through the engine: its choices (prompts x n samples)
// arrive one by one.
struct PromptJob {
  size_t prompt = 0;  // index into the prompts
  PreparedRequest request;
  std::vector<std::optional<runtime::SequenceResult>> samples;
  size_t arrived = 0;
};

io::ResultRecord base_record(const io::PromptRecord& p, const std::string& job_model) {
  io::ResultRecord r;
  r.index = p.index;
  r.id = p.id;
  r.custom_id = p.custom_id.value_or(p.id);
  r.model = p.model.empty() ? job_model : p.model;
  r.chat = p.messages.has_value();
  return r;
}

// The rendered chat prompt, or the request's error when it cannot be rendered.
std::optional<std::string> render_chat_prompt(const io::PromptRecord& p, const io::ChatTemplate* chat,
                                              std::string& error) {
  if (!p.messages) return std::nullopt;
  if (!chat) {
    error = "chat \"messages\" need a tokenizer directory with tokenizer_config.json";
    return std::nullopt;
  }
  try {
    return chat->render(*p.messages);
  } catch (const Error& e) {
    error = e.what();
    return std::nullopt;
  }
}

// Checked like every other output: a missing file must not pass for success.
void write_stats_json(const std::string& path, const nlohmann::json& stats) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << stats.dump(2) << "\n";
  out.close();
  TG_CHECK(out.good(), "--stats-json {}: cannot write the statistics: {}", path, std::strerror(errno));
}

// Refused before any work: a directory that does not exist will not appear later.
void check_stats_json_path(const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::path(path).parent_path();
  TG_CHECK(dir.empty() || fs::is_directory(dir, ec), "--stats-json {}: the directory {} does not exist", path,
           dir.string());
  TG_CHECK(!fs::is_directory(path, ec), "--stats-json {}: is a directory", path);
}

void run_generate(GenerateFlags& f) {
  check_refused_flags(f.refused);
  TG_CHECK(f.defaults.max_tokens > 0 || f.defaults.echo,
           "-n 0 generates nothing; it is only for scoring prompts with --echo --logprobs N");
  prepare_engine_flags(f.engine);
  refuse_out_equal_to_prompts(f);
  check_stats_json_path(f.stats_json);
  const model::Spec spec = load_spec(f.engine);
  require_checkpoint_or_dummy(f.engine);
  // The device (an unsupported device/dtype pair is refused here, before any work), the
  // budgets and the offload dir are checked before the results file opens.
  const runtime::EngineOptions options = make_engine_options(f.engine);
  const AbortPipelineOnFailure abort_on_failure{options.link.get()};
  const auto tok = load_tokenizer(f);
  const auto prompts = read_job_prompts(f);
  const std::string source = prompt_source(f);
  // Checked before the results file is opened, so a doomed run leaves none behind.
  for (const auto& p : prompts) {
    TG_CHECK(p.error || !p.text || tok, "{}:{}: text prompt but no tokenizer: the model directory has no tokenizer.json "
             "(or vocab.json + merges.txt); pass --tokenizer DIR or give prompt_token_ids", source, p.line);
  }
  std::optional<io::ChatTemplate> chat;
  if (tok && (!f.chat_template.empty() ||
              std::any_of(prompts.begin(), prompts.end(), [](const auto& p) { return p.messages.has_value(); }))) {
    chat = io::ChatTemplate::load(tokenizer_dir(f), *tok, f.chat_template);
  }
  const io::ResultFormat format = output_format(f, prompts);
  io::ResultFileOptions file_options;
  file_options.format = format;
  file_options.created = static_cast<int64_t>(std::time(nullptr));
  file_options.job = job_fingerprint(f, spec, prompts, format, options.device);
  std::vector<std::string> ids;
  for (const auto& p : prompts) {
    ids.push_back(format == io::ResultFormat::OpenAi ? p.custom_id.value_or(p.id) : p.id);
    // A prompt list's line holds a list; the job record's prompts hash covers it.
    file_options.prompt_text_hashes.push_back(p.more_prompts.empty() && p.text ? std::optional(io::prompt_text_hash(*p.text))
                                                                               : std::nullopt);
  }
  // In a pipeline only the last stage samples, so it alone writes results; the others
  // take from it where a resumed job starts.
  runtime::StageLink* link = options.link.get();
  if (link) check_ranks_agree(*link, "job", pipeline_job(file_options.job));
  const bool writes_results = link == nullptr || link->is_last();
  std::optional<io::ResultWriter> writer;
  ResumePoint resume;
  file_options.retry_failed = f.retry_failed;
  if (writes_results) {
    try {
      writer.emplace(io::ResultWriter::open(f.out, static_cast<int64_t>(prompts.size()), f.resume, ids, f.overwrite,
                                            file_options));
    } catch (const std::exception& e) {
      if (link) link->set("resume_from", std::string("error: ") + e.what());  // the others stop waiting
      throw;
    }
    resume = {writer->done_count(), writer->retried()};
    if (link) link->set("resume_from", resume_point_text(resume));
  } else {
    const std::string resume_from = link->get("resume_from");
    TG_CHECK(resume_from.rfind("error: ", 0) != 0, "the last rank could not open the results: {}", resume_from.substr(7));
    resume = parse_resume_point(resume_from);
  }
  const int64_t done_before = resume.done;
  if (done_before > 0) spdlog::info("resuming: {} of {} prompts already done in {}", done_before, prompts.size(), f.out);
  if (!resume.retried.empty()) {
    spdlog::info("running the {} failed requests among them again (--retry-failed)", resume.retried.size());
  }
  const auto submit = [&](io::ResultRecord r) {
    if (writer) writer->submit(std::move(r));
  };

  const std::string job_model = std::filesystem::path(f.engine.model).filename().string().empty()
                                    ? f.engine.model : std::filesystem::path(f.engine.model).filename().string();
  // Error records from before an interruption still count against --max-failures.
  int64_t failed = writer ? writer->failed_before() : 0;
  if (failed > 0) {
    spdlog::info("{} of the {} results already done are failed requests (--retry-failed runs them again)", failed,
                 done_before);
  }
  std::vector<io::ResultRecord> failed_records;  // written once the job is known to run
  std::vector<PromptJob> jobs;
  std::vector<runtime::SequenceRequest> requests;
  std::vector<std::pair<size_t, size_t>> request_job;  // request -> (job, sample)
  runtime::Workload max_workload{1, 1};
  std::vector<size_t> to_run(resume.retried.begin(), resume.retried.end());
  for (size_t i = static_cast<size_t>(done_before); i < prompts.size(); ++i) to_run.push_back(i);
  for (const size_t i : to_run) {
    const auto& p = prompts[i];
    std::string chat_error;
    const auto chat_prompt = render_chat_prompt(p, chat ? &*chat : nullptr, chat_error);
    PreparedRequest prepared = chat_error.empty() ? prepare_request(p, tok.get(), spec, f.defaults, chat_prompt)
                                                  : PreparedRequest{};
    if (!chat_error.empty()) prepared.error = fmt::format("{}:{}: {}", source, p.line, chat_error);
    if (prepared.error) {
      std::string message = *prepared.error;
      if (message.rfind(source + ":", 0) != 0 && message.rfind("<stdin>:", 0) != 0) {
        message = fmt::format("{}:{}: {}", source, p.line, message);
      }
      spdlog::error("request \"{}\" failed: {}", p.id, message);
      io::ResultRecord r = base_record(p, job_model);
      r.error = message;
      failed_records.push_back(std::move(r));
      ++failed;
      continue;
    }
    for (const auto& prompt : prepared.prompts) {
      max_workload.prompt_len = std::max<int64_t>(max_workload.prompt_len, static_cast<int64_t>(prompt.ids.size()));
    }
    max_workload.gen_len = std::max(max_workload.gen_len, std::max<int64_t>(1, prepared.max_tokens));
    PromptJob job;
    job.prompt = i;
    const int64_t choices = static_cast<int64_t>(prepared.prompts.size()) * prepared.n;
    job.samples.resize(static_cast<size_t>(choices));
    for (int64_t c = 0; c < choices; ++c) {
      requests.push_back(sequence_request(prepared, p.index, c, tok.get()));
      request_job.emplace_back(jobs.size(), static_cast<size_t>(c));
    }
    job.request = std::move(prepared);
    jobs.push_back(std::move(job));
  }

  max_workload.num_sequences = static_cast<int64_t>(requests.size());
  const auto start = std::chrono::steady_clock::now();
  int64_t prompt_tokens = 0, output_tokens = 0, done = 0;
  std::unique_ptr<model::WeightSource> weights;  // outlives the engine that reads it
  std::optional<runtime::Engine> engine;
  std::optional<runtime::Policy> policy;
  bool replans = false;
  std::optional<ReplannedJob> replan;
  std::optional<policy::HardwareProfile> planned_on;  // the profile a searched plan was priced on
  double placement_seconds = 0;
  if (!requests.empty()) {
    policy = make_policy(f.engine, kDefaultGpuBatchSize, spec, max_workload, options, UnplacedDefault::Searched,
                         &planned_on);
    if (link) check_ranks_agree_on_block_shape(*link, *policy);
    const bool searched = placement_is_searched(f.engine, UnplacedDefault::Searched);
    replans = !link && planned_on &&
              job_replans(searched, f.no_replan, requests.size(), *policy, replan_scope(options.device, *policy));
    const bool searched_by_default = searched && f.engine.policy_file != "auto";
    spdlog::info("policy{}: {}", searched_by_default ? " (searched for this job; --percent or --policy fixes one)" : "",
                 policy->describe());
    runtime::install_interrupt_handlers(
        f.out.empty() || f.out == "-" ? "\ntiergen: interrupted\n"
                                      : fmt::format("\ntiergen: interrupted; finished results are in {}; rerun the "
                                                    "same command with --resume to continue\n", f.out));
    weights = load_weights(f.engine, spec);
    const auto placing = std::chrono::steady_clock::now();
    engine.emplace(spec, *weights, *policy, options, max_workload);
    placement_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - placing).count();
  }
  // The job can run: only now does the results file change.
  if (writer) writer->begin();
  for (auto& r : failed_records) submit(std::move(r));
  if (engine) {
    int64_t token_budget = 0;
    for (const auto& r : requests) token_budget += r.max_new_tokens;
    ProgressBar progress(static_cast<int64_t>(jobs.size()), token_budget,
                         writes_results && !f.quiet && ProgressBar::stderr_is_terminal());
    const auto on_token = [&](size_t, int64_t) { progress.add_token(); };
    const auto on_result = [&](size_t i, const runtime::SequenceResult& result) {
      if (!writes_results) return;
      const auto [j, s] = request_job[i];
      PromptJob& job = jobs[j];
      job.samples[s] = result;
      progress.end_sequence(static_cast<int64_t>(result.tokens.size()), requests[i].max_new_tokens);
      if (++job.arrived < job.samples.size()) return;
      const auto& p = prompts[job.prompt];
      io::ResultRecord r = base_record(p, job_model);
      const auto broken = std::find_if(job.samples.begin(), job.samples.end(), [](const auto& x) { return x->error; });
      if (broken != job.samples.end()) {  // a request the model could not compute fails alone
        r.error = fmt::format("{}:{}: {}", source, p.line, *(*broken)->error);
        spdlog::error("request \"{}\" failed: {}", p.id, *r.error);
        submit(std::move(r));
        job.samples.clear();
        ++failed;
        progress.end_item();
        return;
      }
      r.prompt = p.text;
      for (const auto& more : p.more_prompts) {
        if (more.text) r.more_prompts.push_back(*more.text);
      }
      r.num_prompt_tokens = total_prompt_tokens(job.request);
      for (size_t k = 0; k < job.samples.size(); ++k) {
        io::Completion c = make_completion(*job.samples[k], job.request, static_cast<int64_t>(k), tok.get(), r.chat);
        r.num_output_tokens += static_cast<int64_t>(c.token_ids.size());
        if (k == 0) static_cast<io::Completion&>(r) = std::move(c);
        else r.more.push_back(std::move(c));
      }
      prompt_tokens += r.num_prompt_tokens;
      output_tokens += r.num_output_tokens;
      submit(std::move(r));
      job.samples.clear();
      ++done;
      progress.end_item();
    };
    if (replans) {
      const ReplanContext context{f.engine, spec, options, *weights, *planned_on, max_workload, placement_seconds};
      replan = run_with_replan(context, requests, engine, *policy, on_result, on_token);
    } else {
      engine->generate(requests, on_result, on_token);
    }
    progress.finish();
  }
  if (writer) writer->finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (writes_results) {
    spdlog::info("{} requests: {} completed, {} failed; {} prompt tokens, {} generated tokens in {:.2f} s: {:.2f} "
                 "generated tokens/s", done + failed, done, failed, prompt_tokens, output_tokens, seconds,
                 seconds > 0 ? output_tokens / seconds : 0.0);
  } else {
    spdlog::info("stage {} done in {:.2f} s; the last rank wrote the results", link->rank(), seconds);
  }
  if (engine) {
    // The whole job's times and counts; a re-planned job ran its first block on another
    // engine, and the prediction below is of the last plan over the blocks it ran.
    runtime::Stats job_stats;
    job_stats.absorb(engine->stats());
    if (replan && replan->first_plan_stats) job_stats.absorb(*replan->first_plan_stats);
    const size_t sequences_on_last_plan = replan ? replan->sequences_on_last_plan : requests.size();
    spdlog::info("{}", job_stats.report());
    if (const auto reserved = runtime::cuda_peak_reserved_bytes(options.device)) {
      spdlog::info("{}", cuda_allocator_report(*reserved, job_stats.peak_bytes[runtime::Tier::Gpu],
                                               options.budgets.gpu));
    }
    if (!f.engine.trace.empty()) {
      const std::string path = rank_trace_path(f.engine.trace, link);
      engine->write_trace(path);
      spdlog::info("trace of every task: {}", path);
    }
    if (!policy->exact()) spdlog::warn("{}", policy->exactness());
    // The results are complete: nothing about the prediction may fail the run now.
    // The prediction is of one process running the whole model.
    // Shown on request (the numbers of a short job mislead); never measured now, after
    // the results: a profile of this host is used only when one is cached.
    const bool report = f.report || spdlog::get_level() <= spdlog::level::debug;
    const bool wants_prediction = !link && (report || (!f.stats_json.empty() && writes_results));
    const auto profile = wants_prediction ? profile_for_prediction(f.engine.hw, compat::dtype_name(options.device.dtype),
                                                                   /*may_measure=*/false)
                                          : std::optional<policy::HardwareProfile>();
    std::optional<policy::Prediction> predicted;
    if (profile) predicted = policy::predict(spec, *policy, max_workload, *profile, options.device.dtype_bytes());
    const PredictionScale scale{spec.num_layers, max_workload.gen_len,
                                (static_cast<int64_t>(sequences_on_last_plan) + policy->block_size() - 1) /
                                    policy->block_size()};
    if (predicted && report) {
      spdlog::info("{}", predicted_vs_measured(*predicted, engine->stats(), scale));
      if (seconds < kShortestJobForRatios) {
        spdlog::info("the job ran {:.2f} s: start-up and first touches of memory weigh more than the prediction "
                     "prices, so these ratios mean little; compare on a job of several seconds", seconds);
      }
    }
    if (!f.stats_json.empty() && writes_results) {
      nlohmann::json j = job_stats.to_json();
      j["policy"] = runtime::policy_to_json(*policy);
      j["exact"] = policy->exact();
      if (replan) j["replan"] = replan_json(*replan);
      j["predicted_vs_measured"] =
          predicted ? predicted_vs_measured_json(*predicted, engine->stats(), scale) : nlohmann::json();
      write_stats_json(f.stats_json, j);
    }
  }
  if (failed > f.max_failures) {
    spdlog::error("{} of {} requests failed (their error lines are in {}){}", failed, done + failed,
                  f.out.empty() ? "stdout" : f.out,
                  f.max_failures > 0 ? fmt::format("; --max-failures {} tolerates fewer", f.max_failures)
                                     : "; --max-failures N accepts up to N failed requests");
    exit_status() = 1;
  }
}

void add_request_flags(CLI::App* c, RequestDefaults& d) {
  c->add_option("-n,--max-new-tokens,--max-tokens,--gen-len", d.max_tokens,
                "Tokens to generate per prompt (a request's max_tokens overrides)")
      ->capture_default_str()->check(non_negative());
  c->add_option("--min-tokens", d.min_tokens, "Tokens to generate before end-of-sequence or a stop may end a sample")
      ->capture_default_str()->check(non_negative());
  c->add_option("--temperature", d.temperature, "Sampling temperature; 0 is greedy")->capture_default_str();
  c->add_option("--top-k", d.top_k, "Sample from the k most likely tokens (0: off)")->capture_default_str();
  c->add_option("--top-p", d.top_p, "Nucleus sampling mass (1: off)")->capture_default_str();
  c->add_option("--min-p", d.min_p, "Drop tokens less likely than this fraction of the most likely one (0: off)")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  c->add_option("--seed", d.seed, "Sampling seed (each prompt gets its own stream)")->capture_default_str();
  c->add_option("--num-samples", d.n, "Samples per prompt (OpenAI's n; the samples share the prompt's prefill)")
      ->capture_default_str()->check(CLI::Range(1, 128));
  c->add_option("--stop", d.stop, "Stop string (repeatable): ends a sample, matched on decoded text, not included unless --include-stop-str-in-output")
      ->allow_extra_args(false);  // one string per --stop, as written (CLI11 would split "[/INST]")
  c->add_flag("--include-stop-str-in-output", d.include_stop_str_in_output,
              "Keep the stop string that ended a sample at the end of its text");
  c->add_option("--stop-token-ids", d.stop_token_ids, "Token ids that end a sample (repeatable)");
  c->add_flag("--ignore-eos", d.ignore_eos, "Do not stop at end-of-sequence tokens");
  c->add_option("--presence-penalty", d.presence_penalty, "Penalty for tokens already generated, in [-2, 2]")
      ->capture_default_str();
  c->add_option("--frequency-penalty", d.frequency_penalty, "Penalty per occurrence in the generated tokens, in [-2, 2]")
      ->capture_default_str();
  c->add_option("--repetition-penalty", d.repetition_penalty, "Penalty for tokens of the prompt and output (1: off)")
      ->capture_default_str();
  c->add_option("--logprobs", d.logprobs, "Log-probabilities of each generated token and its N most likely alternatives "
                "(-1: none)")->capture_default_str()->check(CLI::Range(-1, 20));
  c->add_flag("--echo", d.echo, "Start each text with its prompt; with --logprobs, score every prompt token too "
              "(OpenAI's echo; with -n 0 a prompt is only scored, e.g. for perplexity)");
  c->add_flag("--truncate", d.truncate, "Keep the last tokens of prompts too long for the model instead of reporting an error");
  c->add_option("--max-model-len", d.max_model_len, "Cap on prompt + generated tokens per request (default: the model's "
                "positions)")->check(non_negative());
}

void setup_generate(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* c = app.add_subcommand("generate", "Generate completions for a file of prompts (text lines or JSONL)");
  add_engine_flags(c, f->engine, kDefaultGpuBatchSize, UnplacedDefault::Searched);
  auto* file = c->add_option("-p,--prompts", f->prompts, "Prompt file: one prompt per line (.txt), or JSONL with "
                             "\"prompt\", \"prompt_token_ids\" or OpenAI batch requests; - for stdin");
  c->add_option("--prompt", f->prompt_texts, "A prompt given on the command line instead of a file (repeatable: one "
                "request each)")
      ->excludes(file)
      ->allow_extra_args(false);  // one value per --prompt, as written (CLI11 would split "[INST] a, b [/INST]")
  c->add_option("-o,--out", f->out, "Results JSONL (default: stdout); each line is written and synced as soon as it is final");
  c->add_option("--format", f->format, "Prompt file format: auto, text or jsonl")->capture_default_str();
  c->add_option("--output-format", f->output_format, "Results format: auto (openai for OpenAI batch input, else "
                "tiergen), openai (vLLM run-batch lines) or tiergen")->capture_default_str()
      ->check(CLI::IsMember({"auto", "openai", "tiergen"}));
  c->add_option("--tokenizer", f->tokenizer, "Tokenizer directory (default: the model directory)");
  c->add_option("--chat-template", f->chat_template, "Jinja file rendering chat \"messages\" (default: the "
                "\"chat_template\" of the tokenizer directory's tokenizer_config.json)");
  add_request_flags(c, f->defaults);
  c->add_option("--max-failures", f->max_failures, "Failed requests tolerated before the exit status says failure")
      ->capture_default_str()->check(non_negative());
  auto* resume = c->add_flag("--resume", f->resume, "Skip prompts whose results are already in --out (the same job only)");
  c->add_flag("--retry-failed", f->retry_failed, "With --resume: run the requests whose lines in --out are errors "
              "again, and put their results in place of the errors")
      ->needs(resume);
  c->add_flag("--overwrite", f->overwrite, "Replace an existing --out file");
  c->add_flag("--no-replan", f->no_replan, "Keep the searched plan for every block (by default a job of several "
              "blocks fits the hardware profile to its first block and re-plans the rest when the new plan is "
              "predicted to win by more than the model's error band; results are the same either way)");
  c->add_flag("-q,--quiet", f->quiet, "No progress bar on stderr (it is drawn only when stderr is a terminal)");
  c->add_option("--stats-json", f->stats_json, "Write per-task times, throughput and peak memory as JSON");
  c->add_flag("--report", f->report, "After the run, print the cost model's predicted task times beside the measured "
              "ones (also with -v; needs a cached profile of this host: `tiergen profile --cache`)");
  const std::string bench_only = "belongs to `tiergen bench` (FlexGen's synthetic workload); generate reads its "
                                 "prompts from -p/--prompt and sets their length with -n";
  for (const char* name : {"--prompt-len", "--cut-gen-len", "--log-file"}) {
    f->refused.push_back(refuse_flag(c, name, true, bench_only));
  }
  f->refused.push_back(refuse_flag(c, "--no-log", false, bench_only));
  c->callback([f] { run_generate(*f); });
}

}  // namespace

TIERGEN_REGISTER_COMMAND("generate", setup_generate);

}  // namespace tiergen::cli
