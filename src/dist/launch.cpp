#include "tiergen/dist/launch.h"

#include <cstdlib>
#include <string>

#include "tiergen/common/error.h"

namespace tiergen::dist {

namespace {

// An integer environment variable, or `fallback` when unset or empty.
int env_int(const GetEnv& getenv, const char* name, int fallback) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  TG_CHECK(end != v && *end == '\0' && n >= 0 && n < (1 << 20), "environment variable {}='{}' is not a rank or size",
           name, v);
  return static_cast<int>(n);
}

std::string env_str(const GetEnv& getenv, const char* name) {
  const char* v = getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// MASTER_ADDR/MASTER_PORT as a TCP store address, or empty when unset.
std::string master_from_env(const GetEnv& getenv) {
  const std::string addr = env_str(getenv, "MASTER_ADDR"), port = env_str(getenv, "MASTER_PORT");
  if (addr.empty() && port.empty()) return {};
  TG_CHECK(!addr.empty() && !port.empty(), "MASTER_ADDR and MASTER_PORT go together (got MASTER_ADDR='{}', "
           "MASTER_PORT='{}')", addr, port);
  return "tcp://" + addr + ":" + port;
}

void check_init(const std::string& init) {
  const bool file = init.rfind("file:", 0) == 0 && init.size() > 5;
  const bool tcp = init.rfind("tcp://", 0) == 0 && init.find(':', 6) != std::string::npos;
  TG_CHECK(file || tcp, "--dist-init '{}': expected file:PATH (a file all ranks can reach, absent before the job) or "
           "tcp://HOST:PORT", init);
}

}  // namespace

Launch resolve_launch(const LaunchFlags& flags, const GetEnv& getenv) {
  Launch l;
  l.timeout = std::chrono::seconds(flags.timeout_seconds);
  TG_CHECK(flags.timeout_seconds > 0, "--dist-timeout must be positive, got {}", flags.timeout_seconds);
  const bool by_flags = flags.world_size > 0 || flags.rank >= 0;
  const bool by_torchrun = !env_str(getenv, "WORLD_SIZE").empty() || !env_str(getenv, "RANK").empty();
  const bool by_mpirun = !env_str(getenv, "OMPI_COMM_WORLD_SIZE").empty();
  if (by_flags) {
    TG_CHECK(flags.world_size > 0 && flags.rank >= 0, "--rank and --world-size go together (got rank {}, world size {})",
             flags.rank, flags.world_size);
    l.rank = flags.rank;
    l.world_size = flags.world_size;
    l.local_rank = env_int(getenv, "LOCAL_RANK", env_int(getenv, "OMPI_COMM_WORLD_LOCAL_RANK", -1));
    l.launcher = "flags";
  } else if (by_torchrun) {
    TG_CHECK(!env_str(getenv, "WORLD_SIZE").empty() && !env_str(getenv, "RANK").empty(),
             "RANK and WORLD_SIZE go together (torchrun sets both)");
    l.rank = env_int(getenv, "RANK", 0);
    l.world_size = env_int(getenv, "WORLD_SIZE", 1);
    l.local_rank = env_int(getenv, "LOCAL_RANK", 0);
    l.agent_store = env_str(getenv, "TORCHELASTIC_USE_AGENT_STORE") == "True";
    l.launcher = "torchrun environment";
  } else if (by_mpirun) {
    l.rank = env_int(getenv, "OMPI_COMM_WORLD_RANK", 0);
    l.world_size = env_int(getenv, "OMPI_COMM_WORLD_SIZE", 1);
    l.local_rank = env_int(getenv, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
    l.launcher = "mpirun environment";
  } else {
    l.launcher = "single process";
    return l;
  }
  TG_CHECK(l.world_size >= 1 && l.rank < l.world_size, "rank {} is not below the world size {} ({})", l.rank,
           l.world_size, l.launcher);
  if (!l.distributed()) return l;
  l.init = flags.init.empty() ? master_from_env(getenv) : flags.init;
  TG_CHECK(!l.init.empty(), "{} ranks ({}) but no rendezvous: pass --dist-init file:PATH or tcp://HOST:PORT, or set "
           "MASTER_ADDR and MASTER_PORT", l.world_size, l.launcher);
  check_init(l.init);
  // A file store is one host: every rank is local, and (launched by flags) its local
  // rank is its rank.
  const bool one_host = l.init.rfind("file:", 0) == 0;
  l.local_world_size = env_int(getenv, "LOCAL_WORLD_SIZE", env_int(getenv, "OMPI_COMM_WORLD_LOCAL_SIZE",
                                                                   one_host ? l.world_size : 1));
  if (l.local_rank < 0) l.local_rank = one_host ? l.rank : 0;
  l.restart_count = env_int(getenv, "TORCHELASTIC_RESTART_COUNT", 0);
  TG_CHECK(l.local_world_size >= 1 && l.local_world_size <= l.world_size, "{} ranks on this host of a world of {}",
           l.local_world_size, l.world_size);
  return l;
}

}  // namespace tiergen::dist
