// tiergen: high-throughput offline batch generation with offloading.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "tiergen/common/error.h"

int main(int argc, char** argv) {
  CLI::App app{"tiergen: offline batch generation for models larger than the GPU"};
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
