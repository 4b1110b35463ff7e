// runtime::StageLink on LibTorch's c10d: a Gloo process group over a file or TCP store.
// Built when CMake finds Gloo's headers (TIERGEN_HAVE_GLOO); otherwise `connect`
// refuses a multi-process job with what to install.
#include "tiergen/dist/launch.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <optional>
#include <thread>

#include "src/dist/file_store_guard.h"
#include "src/dist/store_poll.h"
#include "tiergen/common/error.h"

#ifdef TIERGEN_HAVE_GLOO
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO  // ProcessGroupGloo.hpp is empty without it (TorchConfig does not set it)
#endif
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

namespace tiergen::dist {

#ifdef TIERGEN_HAVE_GLOO

namespace {

struct TcpAddress {
  std::string host;
  uint16_t port = 0;
};

TcpAddress parse_tcp(const std::string& init) {
  const std::string rest = init.substr(6);
  const auto colon = rest.rfind(':');
  TcpAddress a;
  a.host = rest.substr(0, colon);
  int port = 0;
  try {
    port = std::stoi(rest.substr(colon + 1));
  } catch (const std::exception&) {
    port = -1;
  }
  TG_CHECK(!a.host.empty() && port > 0 && port < 65536, "rendezvous '{}': expected tcp://HOST:PORT with a port in 1-65535",
           init);
  a.port = static_cast<uint16_t>(port);
  return a;
}

bool is_loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0; }

// c10d's errors carry a C++ backtrace in what(); users get the message.
std::string message_of(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

std::string file_store_path(const Launch& l) { return l.init.rfind("file:", 0) == 0 ? l.init.substr(5) : std::string(); }

// LibTorch 2.x's TCPStoreOptions::useLibUV (on by default) asks for a server backend
// that builds without libuv (Debian's among them) lack; the classic one is in all.
template <typename Options>
auto use_classic_tcp_backend(Options& o, int) -> decltype(o.useLibUV = false, void()) {
  o.useLibUV = false;
}
template <typename Options>
void use_classic_tcp_backend(Options&, long) {}

c10::intrusive_ptr<::c10d::Store> base_store(const Launch& l) {
  if (!file_store_path(l).empty()) return c10::make_intrusive<::c10d::FileStore>(file_store_path(l), l.world_size);
  const TcpAddress a = parse_tcp(l.init);
  if (l.rank == 0 && !l.agent_store && is_loopback(a.host)) {
    spdlog::warn("the TCP rendezvous store listens on port {} of every interface, not only {}: LibTorch's TCPStore "
                 "cannot bind one address, and it has no authentication, so a firewall must keep that port from "
                 "other hosts; on one host, --dist-init file:PATH keeps the rendezvous local", a.port, a.host);
  }
  ::c10d::TCPStoreOptions o;
  o.port = a.port;
  o.isServer = l.rank == 0 && !l.agent_store;
  o.numWorkers = static_cast<size_t>(l.world_size);
  o.waitWorkers = false;
  o.timeout = l.timeout;
  use_classic_tcp_backend(o, 0);
  return c10::make_intrusive<::c10d::TCPStore>(a.host, o);
}

// A restarted torchrun attempt must not read the keys of the one before it (the
// agent's store outlives attempts), as torch's own rendezvous does.
c10::intrusive_ptr<::c10d::Store> make_store(const Launch& l) {
  return c10::make_intrusive<::c10d::PrefixStore>(fmt::format("tiergen/attempt_{}", l.restart_count), base_store(l));
}

// The local address this host reaches `a` from: the source address of the route the
// kernel picks (a UDP socket's connect sends nothing). Empty when there is none.
std::string local_address_towards(const TcpAddress& a) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(a.host.c_str(), std::to_string(a.port).c_str(), &hints, &found) != 0) return {};
  std::string local;
  for (addrinfo* ai = found; ai != nullptr && local.empty(); ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage self{};
    socklen_t length = sizeof self;
    char text[INET6_ADDRSTRLEN] = {};
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &length) == 0) {
      const void* address = self.ss_family == AF_INET
                                ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&self)->sin_addr)
                                : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&self)->sin6_addr);
      if (::inet_ntop(self.ss_family, address, text, sizeof text) != nullptr) local = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return local;
}

// The address Gloo's pairs listen on: the interface GLOO_SOCKET_IFNAME names (as torch
// reads it); loopback for a single host (a file store or a loopback master); else the
// address this host reaches the master from, which the other hosts can reach too.
// (Gloo's own default, the address of the host's name, is often a loopback one, such
// as Debian's 127.0.1.1: peers on other hosts could not connect to it.)
std::shared_ptr<::gloo::transport::Device> make_device(const Launch& l) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname != '\0') {
    return ::c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  if (l.init.rfind("file:", 0) == 0 || is_loopback(parse_tcp(l.init).host)) {
    return ::c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  const TcpAddress master = parse_tcp(l.init);
  const std::string local = local_address_towards(master);
  TG_CHECK(!local.empty(), "rank {}: no route from this host to the master {}:{} (set GLOO_SOCKET_IFNAME to the "
           "interface the ranks reach each other on)", l.rank, master.host, master.port);
  spdlog::info("pipeline messages on {} (the address this host reaches {} from; GLOO_SOCKET_IFNAME overrides)", local,
               master.host);
  return ::c10d::ProcessGroupGloo::createDeviceForHostname(local);
}

class GlooStageLink final : public runtime::StageLink {
 public:
  explicit GlooStageLink(const Launch& l)
      : rank_(l.rank), world_size_(l.world_size), timeout_(l.timeout), store_file_(file_store_path(l)) {
    if (!store_file_.empty()) store_guard_.emplace(store_file_);  // before the store reads the file
    try {
      store_ = make_store(l);
      store_->setTimeout(timeout_);
      auto options = ::c10d::ProcessGroupGloo::Options::create(timeout_);
      options->devices.push_back(make_device(l));
      group_ = c10::make_intrusive<::c10d::ProcessGroupGloo>(store_, rank_, world_size_, options);
    } catch (const std::exception& e) {
      remove_store_file();
      TG_THROW("rank {} of {} could not join the job at {} within {} s (are all {} ranks started, with the same "
               "rendezvous?): {}", rank_, world_size_, l.init, l.timeout.count(), world_size_, message_of(e));
    }
  }

  // A job whose transport failed leaves its file store behind (a dead rank never
  // signs off), and the next job at the same path would read this one's addresses.
  // Not after an orderly abort: every rank exits normally, the last rank's guard
  // removes the file, and a rank still polling it must not find it gone (c10d's file
  // store retries a missing file until its timeout).
  ~GlooStageLink() override {
    if (failed_) remove_store_file();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  void set(const std::string& key, const std::string& value) override {
    guarded([&] { store_->set(key, std::vector<uint8_t>(value.begin(), value.end())); });
  }

  // Polls for the key or another rank's abort (src/dist/store_poll.h), up to the timeout.
  std::string get(const std::string& key) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      StoreLook look = StoreLook::NeitherYet;
      guarded([&] {
        look = look_for_key([&](const char* name) { return store_->check({name}); }, key.c_str(), kAbortKey);
      });
      if (look == StoreLook::KeyPresent) return text_of(key);
      // The aborting rank exits normally, and the last rank's guard removes the
      // file once every rank has: this rank leaves it alone.
      if (look == StoreLook::Aborted) TG_THROW("rank {}: {}", rank_, text_of(kAbortKey));
      if (std::chrono::steady_clock::now() > deadline) {
        failed_ = true;
        TG_THROW("rank {}: waited {} s for '{}' from another rank (--dist-timeout)", rank_,
                 std::chrono::duration_cast<std::chrono::seconds>(timeout_).count(), key);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  void abort(const std::string& why) override {
    try {
      store_->set(kAbortKey, std::vector<uint8_t>(why.begin(), why.end()));
    } catch (const std::exception&) {
      // The store may be what failed; the others then fail on it too.
    }
  }

 protected:
  std::function<void()> send_raw(const at::Tensor& tensor, int peer, int tag) override {
    std::vector<at::Tensor> tensors{tensor};
    c10::intrusive_ptr<::c10d::Work> work;
    guarded([&] { work = group_->send(tensors, peer, tag); });
    return [this, work, tensors] { guarded([&] { work->wait(timeout_); }); };
  }
  void recv_raw(at::Tensor& tensor, int peer, int tag) override {
    std::vector<at::Tensor> tensors{tensor};
    guarded([&] { group_->recv(tensors, peer, tag)->wait(timeout_); });
  }

 private:
  // Runs a c10d call; a failure marks the job failed and comes out as a plain message.
  template <typename F>
  void guarded(F&& call) {
    try {
      call();
    } catch (const std::exception& e) {
      failed_ = true;
      throw std::runtime_error(message_of(e));
    }
  }

  static constexpr const char* kAbortKey = "abort";

  std::string text_of(const std::string& key) {
    std::vector<uint8_t> bytes;
    guarded([&] { bytes = store_->get(key); });
    return std::string(bytes.begin(), bytes.end());
  }

  void remove_store_file() const {
    if (!store_file_.empty()) ::unlink(store_file_.c_str());
  }

  int rank_, world_size_;
  std::chrono::milliseconds timeout_;
  std::string store_file_;
  std::atomic<bool> failed_{false};
  std::optional<FileStoreGuard> store_guard_;  // outlives the store (destroyed after it)
  c10::intrusive_ptr<::c10d::Store> store_;
  c10::intrusive_ptr<::c10d::ProcessGroupGloo> group_;
};

}  // namespace

bool have_c10d() { return true; }

std::shared_ptr<runtime::StageLink> connect(const Launch& launch) {
  TG_CHECK(launch.distributed(), "internal: connect() for a single process");
  spdlog::info("joining {} ranks at {} ({}; timeout {} s)", launch.world_size, launch.init, launch.launcher,
               launch.timeout.count());
  return std::make_shared<GlooStageLink>(launch);
}

#else

bool have_c10d() { return false; }

std::shared_ptr<runtime::StageLink> connect(const Launch& launch) {
  TG_THROW("{} ranks asked for ({}), but this build of tiergen has no multi-process support: it needs LibTorch's "
           "c10d with Gloo (on Debian, install libgloo-dev and rebuild)", launch.world_size, launch.launcher);
}

#endif

}  // namespace tiergen::dist
