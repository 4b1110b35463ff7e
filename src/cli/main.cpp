// tiergen: high-throughput offline batch generation with offloading.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <iostream>
#include <new>

#include "kernels/cpu/cpu_features.h"
#include "src/cli/command.h"
#include "src/cli/progress.h"
#include "src/cli/suggest.h"
#include "tiergen/common/standard_streams.h"
#include "tiergen/common/error.h"
#include "tiergen/runtime/host_memory.h"

namespace tiergen::cli {

std::vector<CommandRegistration>& command_registry() {
  static std::vector<CommandRegistration> registry;
  return registry;
}

int& exit_status() {
  static int status = 0;
  return status;
}

namespace {

// The flags a command accepts, as typed ("--gpu-batch-size", "-b"); hidden ones left out.
std::vector<std::string> flag_names(const CLI::App* command) {
  std::vector<std::string> names;
  for (const CLI::Option* o : command->get_options()) {
    if (o->get_group().empty()) continue;
    for (const auto& n : o->get_lnames()) names.push_back("--" + n);
    for (const auto& n : o->get_snames()) names.push_back("-" + n);
  }
  return names;
}

// Every long flag of the program and its commands, as typed ("--top-p").
std::vector<std::string> all_flag_names(CLI::App& app) {
  std::vector<std::string> names = flag_names(&app);
  for (const CLI::App* c : app.get_subcommands([](CLI::App*) { return true; })) {
    const auto more = flag_names(c);
    names.insert(names.end(), more.begin(), more.end());
  }
  return names;
}

// vLLM's and FlexGen's spellings of a flag with underscores ("--top_p", "--gpu_batch_size")
// are read as the flag with dashes, where that is one of ours and the underscored one is not.
std::vector<std::string> with_dashed_flags(int argc, char** argv, const std::vector<std::string>& flags) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& arg = args[i];
    if (arg == "--") break;  // what follows is not flags
    if (arg.rfind("--", 0) != 0) continue;
    const size_t end = std::min(arg.find('='), arg.size());
    std::string name = arg.substr(0, end);
    if (name.find('_') == std::string::npos || std::find(flags.begin(), flags.end(), name) != flags.end()) continue;
    std::replace(name.begin() + 2, name.end(), '_', '-');
    if (std::find(flags.begin(), flags.end(), name) != flags.end()) arg = name + arg.substr(end);
  }
  return args;
}

// A parse error in one line: what was wrong, the closest flags or commands when an
// argument was not expected, and where the usage is.
std::string parse_error_line(CLI::App& app, const CLI::ParseError& error) {
  const auto parsed = app.get_subcommands();
  const std::string command = parsed.empty() ? "" : " " + parsed.front()->get_name();
  const std::string usage = "; see `tiergen help" + command + "`";
  // Arguments it did not expect come first: CLI11 may throw another error before it
  // gets to them (a required --model, or no command when the command was mistyped).
  std::vector<std::string> commands;
  for (const CLI::App* c : app.get_subcommands([](CLI::App*) { return true; })) commands.push_back(c->get_name());
  const std::vector<std::string> flags = all_flag_names(app);
  for (const std::string& arg : app.remaining()) {
    const bool flag = arg.size() > 1 && arg[0] == '-' && !std::isdigit(static_cast<unsigned char>(arg[1]));
    if (!flag && !parsed.empty()) continue;  // a value of the unknown flag
    const std::string name = flag ? arg.substr(0, arg.find('=')) : arg;
    return "tiergen" + command + ": unknown " + (flag ? "flag" : "command") + " '" + name + "'" +
           did_you_mean(name, flag ? flags : commands) + usage;
  }
  if (dynamic_cast<const CLI::ExtrasError*>(&error) == nullptr) return "tiergen" + command + ": " + error.what() + usage;
  const auto extra = app.remaining();
  return "tiergen" + command + ": unexpected argument '" + (extra.empty() ? std::string() : extra.front()) + "'" + usage;
}

}  // namespace

// The version, and which CPU kernel level runs here: bug reports and benchmark numbers
// depend on it (TIERGEN_CPU_ISA caps it).
std::string version_text() {
  using namespace tiergen::kernels;
  return "tiergen 0.1.0\nCPU kernels: " + std::string(cpu_isa_name(cpu_isa_in_use())) + " (this CPU supports up to " +
         cpu_isa_name(cpu_isa_supported()) + "; native bf16 products: " +
         (cpu_has_native_bf16_products() ? "yes" : "no, bf16 GEMMs widened to fp32") + ")";
}

}  // namespace tiergen::cli

int main(int argc, char** argv) {
  // First: it holds only for threads that have not allocated yet.
  tiergen::runtime::keep_freed_host_memory_for_reuse();
  tiergen::reopen_closed_standard_streams();  // before anything opens a file
  // Logs go to stderr; stdout is reserved for results.
  // Through the progress bar's sink, so log lines never land on the bar's line.
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "tiergen", tiergen::cli::bar_aware_sink(std::make_shared<spdlog::sinks::stderr_color_sink_mt>())));
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  // A wrong TIERGEN_CPU_ISA fails here, before any command loads a model.
  try {
    (void)tiergen::kernels::cpu_isa_cap();
  } catch (const std::exception& e) {
    std::cerr << "tiergen: " << e.what() << "\n";
    return 2;
  }

  CLI::App app{
      "tiergen: high-throughput offline batch generation with OPT and LLaMA models larger than the GPU,\n"
      "streaming weights, KV cache and activations across GPU, CPU and disk."};
  app.require_subcommand(1);
  app.fallthrough();  // `tiergen generate -v ...`: the global flags also after the subcommand
  app.set_version_flag("--version", tiergen::cli::version_text);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Debug logging");
  app.parse_complete_callback([&] {
    if (verbose) spdlog::set_level(spdlog::level::debug);
  });
  auto& registry = tiergen::cli::command_registry();
  std::sort(registry.begin(), registry.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& command : registry) command.setup(app);

  try {
    std::vector<std::string> args = tiergen::cli::with_dashed_flags(argc, argv, tiergen::cli::all_flag_names(app));
    std::vector<char*> pointers;
    for (std::string& arg : args) pointers.push_back(arg.data());
    app.parse(static_cast<int>(pointers.size()), pointers.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::cerr << tiergen::cli::parse_error_line(app, e) << "\n";
    return 2;
  } catch (const tiergen::Error& e) {
    spdlog::error("{}", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    // The tiers' budgets are checked before work starts; this is memory outside them
    // (prompts, tokenization, libraries) or a host that has less than it reports.
    spdlog::error("out of host memory (an allocation failed): lower the prompts' size or number, -b, or --cpu-mem, "
                  "or raise the process's memory limit (ulimit -v)");
    return 1;
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    return 2;
  }
  return tiergen::cli::exit_status();
}
