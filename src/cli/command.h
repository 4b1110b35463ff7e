#pragma once
// Subcommands register themselves: each src/cli/<name>.cpp defines a setup function
// that adds its CLI11 subcommand and callback, and registers it with
// TIERGEN_REGISTER_COMMAND. main.cpp runs them all, so adding a command touches one file.
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace tiergen::cli {

using CommandSetup = std::function<void(CLI::App& app)>;

struct CommandRegistration {
  std::string name;
  CommandSetup setup;
};

std::vector<CommandRegistration>& command_registry();

struct CommandRegistrar {
  CommandRegistrar(std::string name, CommandSetup setup) {
    command_registry().push_back({std::move(name), std::move(setup)});
  }
};

// Callbacks set this to report a non-zero exit status without throwing.
int& exit_status();

}  // namespace tiergen::cli

#define TIERGEN_REGISTER_COMMAND(name, setup) \
  static ::tiergen::cli::CommandRegistrar tiergen_command_registrar_##setup(name, setup)
