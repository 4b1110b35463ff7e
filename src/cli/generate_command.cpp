// `tiergen generate`: prompts file in, results JSONL out, through the offloading engine.
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "src/cli/command.h"
#include "src/cli/engine_flags.h"
#include "src/cli/host_profile.h"
#include "src/cli/prediction_report.h"
#include "src/cli/progress.h"
#include "tiergen/common/error.h"
#include "tiergen/io/prompts.h"
#include "tiergen/io/results.h"
#include "tiergen/runtime/disk_tier.h"
#include "tiergen/tokenizer/tokenizer.h"

namespace tiergen::cli {

namespace {

struct GenerateFlags {
  EngineFlags engine;
  std::string prompts, out, format = "auto", tokenizer, stats_json;
  int64_t max_new_tokens = 32;
  int64_t batch_size = 8;
  double temperature = 0.0, top_p = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
  bool resume = false, overwrite = false, truncate = false, quiet = false;
};

struct PreparedPrompt {
  std::vector<int64_t> ids;
  std::optional<std::string> error;
};

std::unique_ptr<tokenizer::Tokenizer> load_tokenizer(const GenerateFlags& f) {
  if (!f.tokenizer.empty()) return tokenizer::Tokenizer::load(f.tokenizer);
  if (std::filesystem::is_directory(f.engine.model) && tokenizer::Tokenizer::exists_in(f.engine.model)) {
    return tokenizer::Tokenizer::load(f.engine.model);
  }
  return nullptr;
}

// Token ids of a prompt, or the per-prompt error that goes into its result line.
PreparedPrompt prepare(const io::PromptRecord& p, const tokenizer::Tokenizer* tok, const model::Spec& spec,
                       int64_t max_new, const GenerateFlags& f) {
  PreparedPrompt out;
  // Text prompts without a tokenizer were refused before the results file opened.
  out.ids = p.text ? tok->encode(*p.text) : p.token_ids;
  for (int64_t id : out.ids) {
    if (id < 0 || id >= spec.vocab_size) {
      out.error = fmt::format("token id {} is outside the model's vocabulary of {}", id, spec.vocab_size);
      return out;
    }
  }
  if (out.ids.empty()) out.error = "the prompt has no tokens";
  const int64_t room = spec.max_positions - max_new;
  if (static_cast<int64_t>(out.ids.size()) > room) {
    if (f.truncate && room > 0) {
      out.ids.erase(out.ids.begin(), out.ids.end() - room);  // keep the most recent tokens
    } else {
      out.error = fmt::format("prompt of {} tokens plus {} new tokens exceeds the model's {} positions (use --truncate "
                              "to keep the last {} tokens)", out.ids.size(), max_new, spec.max_positions, std::max<int64_t>(room, 0));
    }
  }
  return out;
}

runtime::SamplingParams sampling_for(const io::PromptRecord& p, const GenerateFlags& f) {
  runtime::SamplingParams s{f.temperature, f.top_k, f.top_p, f.seed};
  if (p.overrides.temperature) s.temperature = *p.overrides.temperature;
  if (p.overrides.top_k) s.top_k = *p.overrides.top_k;
  if (p.overrides.top_p) s.top_p = *p.overrides.top_p;
  if (p.overrides.seed) s.seed = static_cast<uint64_t>(*p.overrides.seed);
  s.validate();
  return s;
}

void run_generate(const GenerateFlags& f) {
  const model::Spec spec = load_spec(f.engine);
  const auto tok = load_tokenizer(f);
  const auto prompts = io::read_prompts(f.prompts, io::parse_prompt_format(f.format));
  // Checked before the results file is opened, so a doomed run leaves none behind.
  for (const auto& p : prompts) {
    TG_CHECK(!p.text || tok, "{}:{}: text prompt but no tokenizer: the model directory has no tokenizer.json (or "
             "vocab.json + merges.txt); pass --tokenizer DIR or give prompt_token_ids", f.prompts, p.line);
  }
  auto writer = io::ResultWriter::open(f.out, static_cast<int64_t>(prompts.size()), f.resume, io::prompt_ids(prompts),
                                       f.overwrite);
  if (writer.done_count() > 0) spdlog::info("resuming: {} of {} prompts already done in {}", writer.done_count(), prompts.size(), f.out);

  std::vector<runtime::SequenceRequest> requests;
  std::vector<size_t> request_prompt;  // request -> prompt index
  runtime::Workload max_workload{1, 1};
  for (size_t i = static_cast<size_t>(writer.done_count()); i < prompts.size(); ++i) {
    const auto& p = prompts[i];
    const int64_t max_new = p.overrides.max_tokens.value_or(f.max_new_tokens);
    PreparedPrompt prepared = prepare(p, tok.get(), spec, max_new, f);
    if (prepared.error) {
      spdlog::warn("{}:{}: {}", f.prompts, p.line, *prepared.error);
      io::ResultRecord r;
      r.index = p.index;
      r.id = p.id;
      r.error = fmt::format("{}:{}: {}", f.prompts, p.line, *prepared.error);
      writer.submit(std::move(r));
      continue;
    }
    max_workload.prompt_len = std::max<int64_t>(max_workload.prompt_len, static_cast<int64_t>(prepared.ids.size()));
    max_workload.gen_len = std::max(max_workload.gen_len, max_new);
    requests.push_back({p.index, std::move(prepared.ids), max_new, sampling_for(p, f)});
    request_prompt.push_back(i);
  }

  max_workload.num_sequences = static_cast<int64_t>(requests.size());
  const runtime::EngineOptions options = make_engine_options(f.engine);
  const runtime::Policy policy = make_policy(f.engine, f.batch_size, spec, max_workload, options);
  spdlog::info("policy: {}", policy.describe());
  runtime::install_interrupt_handlers(
      f.out.empty() || f.out == "-" ? "\ntiergen: interrupted\n"
                                    : fmt::format("\ntiergen: interrupted; finished results are in {}; rerun the same "
                                                  "command with --resume to continue\n", f.out));
  const auto weights = load_weights(f.engine, spec);
  runtime::Engine engine(spec, *weights, policy, options, max_workload);

  const auto start = std::chrono::steady_clock::now();
  int64_t prompt_tokens = 0, output_tokens = 0, done = 0;
  ProgressBar progress(static_cast<int64_t>(requests.size()), !f.quiet && ProgressBar::stderr_is_terminal());
  engine.generate(requests, [&](size_t i, const runtime::SequenceResult& result) {
    const auto& p = prompts[request_prompt[i]];
    io::ResultRecord r;
    r.index = p.index;
    r.id = p.id;
    r.prompt = p.text;
    if (tok) r.text = tok->decode(result.tokens);
    r.token_ids = result.tokens;
    r.finish_reason = result.finish_reason;
    r.num_prompt_tokens = static_cast<int64_t>(requests[i].prompt.size());
    r.num_output_tokens = static_cast<int64_t>(result.tokens.size());
    prompt_tokens += r.num_prompt_tokens;
    output_tokens += r.num_output_tokens;
    writer.submit(std::move(r));
    progress.update(++done, output_tokens);
  });
  progress.finish();
  writer.finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("{} prompts, {} prompt tokens, {} generated tokens in {:.2f} s: {:.2f} generated tokens/s",
               requests.size(), prompt_tokens, output_tokens, seconds, seconds > 0 ? output_tokens / seconds : 0.0);
  spdlog::info("{}", engine.stats().report());
  if (!policy.exact()) spdlog::warn("{}", policy.exactness());
  // The results are complete: nothing about the prediction may fail the run now.
  const auto profile = profile_for_prediction(f.engine.hw);
  std::optional<policy::Prediction> predicted;
  if (profile) predicted = policy::predict(spec, policy, max_workload, *profile, options.device.dtype_bytes());
  const PredictionScale scale{spec.num_layers, max_workload.gen_len,
                              (static_cast<int64_t>(requests.size()) + policy.block_size() - 1) / policy.block_size()};
  if (predicted) spdlog::info("{}", predicted_vs_measured(*predicted, engine.stats(), scale));
  if (!f.stats_json.empty()) {
    nlohmann::json j = engine.stats().to_json();
    j["policy"] = runtime::policy_to_json(policy);
    j["exact"] = policy.exact();
    j["predicted_vs_measured"] = predicted ? predicted_vs_measured_json(*predicted, engine.stats(), scale) : nlohmann::json();
    std::ofstream(f.stats_json) << j.dump(2) << "\n";
  }
}

void setup_generate(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* c = app.add_subcommand("generate", "Generate completions for a file of prompts (text lines or JSONL)");
  add_engine_flags(c, f->engine, 8);
  c->add_option("-p,--prompts", f->prompts, "Prompt file: one prompt per line (.txt), or JSONL with \"prompt\", "
                "\"prompt_token_ids\" or OpenAI batch requests; - for stdin")->required();
  c->add_option("-o,--out", f->out, "Results JSONL (default: stdout); each line is written and synced as soon as it is final");
  c->add_option("--format", f->format, "Prompt file format: auto, text or jsonl")->capture_default_str();
  c->add_option("--tokenizer", f->tokenizer, "Tokenizer directory (default: the model directory)");
  c->add_option("-n,--max-new-tokens", f->max_new_tokens, "Tokens to generate per prompt (a JSONL max_tokens overrides)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  c->add_option("-b,--batch-size", f->batch_size, "Sequences per gpu batch when no policy sets it")->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--temperature", f->temperature, "Sampling temperature; 0 is greedy")->capture_default_str();
  c->add_option("--top-k", f->top_k, "Sample from the k most likely tokens (0: off)")->capture_default_str();
  c->add_option("--top-p", f->top_p, "Nucleus sampling mass (1: off)")->capture_default_str();
  c->add_option("--seed", f->seed, "Sampling seed (each prompt gets its own stream)")->capture_default_str();
  c->add_flag("--resume", f->resume, "Skip prompts whose results are already in --out");
  c->add_flag("--overwrite", f->overwrite, "Replace an existing --out file");
  c->add_flag("--truncate", f->truncate, "Keep the last tokens of prompts too long for the model instead of reporting an error");
  c->add_flag("-q,--quiet", f->quiet, "No progress bar on stderr (it is drawn only when stderr is a terminal)");
  c->add_option("--stats-json", f->stats_json, "Write per-task times, throughput and peak memory as JSON");
  c->callback([f] { run_generate(*f); });
}

}  // namespace

TIERGEN_REGISTER_COMMAND("generate", setup_generate);

}  // namespace tiergen::cli
