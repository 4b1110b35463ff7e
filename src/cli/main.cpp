// tiergen: high-throughput offline batch generation with offloading.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "src/cli/command.h"
#include "tiergen/common/error.h"

namespace tiergen::cli {

std::vector<CommandRegistration>& command_registry() {
  static std::vector<CommandRegistration> registry;
  return registry;
}

int& exit_status() {
  static int status = 0;
  return status;
}

}  // namespace tiergen::cli

int main(int argc, char** argv) {
  // Logs go to stderr; stdout is reserved for results.
  spdlog::set_default_logger(spdlog::stderr_color_mt("tiergen"));
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");

  CLI::App app{
      "tiergen: high-throughput offline batch generation with OPT and LLaMA models larger than the GPU,\n"
      "streaming weights, KV cache and activations across GPU, CPU and disk."};
  app.require_subcommand(1);
  app.fallthrough();  // `tiergen generate -v ...`: the global flags also after the subcommand
  app.set_version_flag("--version", "tiergen 0.1.0");
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Debug logging");
  app.parse_complete_callback([&] {
    if (verbose) spdlog::set_level(spdlog::level::debug);
  });
  auto& registry = tiergen::cli::command_registry();
  std::sort(registry.begin(), registry.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& command : registry) command.setup(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tiergen::Error& e) {
    spdlog::error("{}", e.what());
    return 1;
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    return 2;
  }
  return tiergen::cli::exit_status();
}
