// `tiergen list-presets`: the built-in model presets (run on seeded dummy weights).
#include <fmt/format.h>

#include <iostream>

#include "src/cli/command.h"
#include "tiergen/model/presets.h"

namespace tiergen::cli {

namespace {

void print_presets() {
  for (const auto& name : model::preset_names()) {
    const auto spec = model::find_preset(name);
    if (!spec) continue;
    std::cout << fmt::format("{:<16} {} layers, hidden {}, vocab {}, {} positions\n", name, spec->num_layers,
                             spec->hidden_size, spec->vocab_size, spec->max_positions);
  }
}

void setup_list_presets(CLI::App& app) {
  CLI::App* c = app.add_subcommand("list-presets", "List the built-in model presets (-m NAME runs one on dummy weights)");
  c->callback(print_presets);
}

}  // namespace

TIERGEN_REGISTER_COMMAND("list-presets", setup_list_presets);

}  // namespace tiergen::cli
