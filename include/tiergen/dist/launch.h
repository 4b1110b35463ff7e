#pragma once
// Where this process sits in a multi-process (pipeline) job, as the ecosystem's
// launchers say it: a torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT; TORCHELASTIC_USE_AGENT_STORE), mpirun's
// (OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK; MPI only launches), or flags, which
// win over both. The rendezvous is a c10d store: a file shared by the ranks
// (file:PATH, single host) or TCP (tcp://HOST:PORT, rank 0 serving it unless an agent
// already does).
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "tiergen/runtime/stage_link.h"

namespace tiergen::dist {

struct LaunchFlags {
  int rank = -1;        // -1: not given
  int world_size = 0;   // 0: not given
  std::string init;     // --dist-init: file:PATH or tcp://HOST:PORT; empty: from the environment
  int timeout_seconds = 600;
};

struct Launch {
  int rank = 0, world_size = 1, local_rank = 0;
  // Ranks on this host, which share its RAM and disk: LOCAL_WORLD_SIZE (torchrun),
  // OMPI_COMM_WORLD_LOCAL_SIZE (mpirun), else every rank for a file store (one
  // host), else 1.
  int local_world_size = 1;
  std::string init;            // file:PATH or tcp://HOST:PORT
  bool agent_store = false;    // torchrun's agent serves the TCP store: every rank is a client
  int restart_count = 0;       // TORCHELASTIC_RESTART_COUNT: each attempt has its own keys in the store
  std::string launcher;        // what said so: "flags", "torchrun environment", "mpirun environment"
  std::chrono::seconds timeout{600};
  bool distributed() const { return world_size > 1; }
};

using GetEnv = std::function<const char*(const char*)>;

// Flags first, then RANK/WORLD_SIZE, then OMPI_COMM_WORLD_*; a single process when
// none says more than one rank. Refuses incomplete or inconsistent settings, naming
// the variable or flag.
Launch resolve_launch(const LaunchFlags& flags, const GetEnv& getenv = ::getenv);

// Whether this build can connect ranks (LibTorch's c10d with Gloo was found).
bool have_c10d();

// Joins the job: the store, then a Gloo process group over it, with `launch.timeout`
// for every operation, so a dead or stuck rank fails the others instead of hanging.
std::shared_ptr<runtime::StageLink> connect(const Launch& launch);

}  // namespace tiergen::dist
