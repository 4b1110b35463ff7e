// `tiergen help [COMMAND]`: the same text as `tiergen --help` or `tiergen COMMAND --help`,
// as git and cargo users type it.
#include <iostream>

#include "src/cli/command.h"
#include "src/cli/suggest.h"
#include "tiergen/common/error.h"

namespace tiergen::cli {

namespace {

void print_help(CLI::App& app, const std::string& command) {
  if (command.empty()) {
    // app.help() would give the help of the subcommand being run: this one.
    std::cout << app.get_formatter()->make_help(&app, app.get_name(), CLI::AppFormatMode::Normal);
    return;
  }
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == command) {
      std::cout << sub->help(app.get_name());
      return;
    }
    names.push_back(sub->get_name());
  }
  TG_THROW("help: no command '{}'{}; `tiergen help` lists them", command, did_you_mean(command, names));
}

void setup_help(CLI::App& app) {
  auto command = std::make_shared<std::string>();
  CLI::App* c = app.add_subcommand("help", "Print the help of tiergen, or of one command (tiergen help generate)");
  c->add_option("command", *command, "The command whose flags to show");
  c->callback([&app, command] { print_help(app, *command); });
}

}  // namespace

TIERGEN_REGISTER_COMMAND("help", setup_help);

}  // namespace tiergen::cli
