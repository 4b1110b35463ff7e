#pragma once
// How a pipeline stage talks to the others: point-to-point messages of host tensors
// between ranks (rank = stage), and a small key-value store for facts all ranks must
// agree on. The runtime sees only this interface; src/dist implements it on LibTorch's
// c10d (a Gloo process group and a file or TCP store).
//
// Every message goes out as a header naming what it is (kind, group, token, batch)
// and how many elements of what size follow, then the payload. The receiver derives the shape it
// expects and compares the header before the payload arrives: a short message must
// never complete silently into a longer buffer (Gloo allows that).
#include <ATen/ATen.h>

#include <functional>
#include <string>

namespace tiergen::runtime {

// What a message carries and where it belongs in the schedule.
struct MessageLabel {
  // Probe: link measurements (link_probe.h), never mixed with a job's messages.
  enum Kind : int64_t { Hidden = 1, Feedback = 2, Probe = 3 };
  Kind kind = Hidden;
  int64_t group = 0, token = 0, batch = 0;
  std::string describe() const;
};

class StageLink {
 public:
  virtual ~StageLink() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  bool is_first() const { return rank() == 0; }
  bool is_last() const { return rank() == world_size() - 1; }

  // Sends `tensor` (host, contiguous) to `peer`; returns at once. The send holds the
  // tensor until it completes (the caller need not keep it); the returned wait blocks
  // until then and rethrows a failure naming the peer.
  std::function<void()> send(const at::Tensor& tensor, int peer, const MessageLabel& label);
  // Receives into `tensor` (host, contiguous, the shape the schedule derives) from
  // `peer`; throws, naming the peer and both labels, when the sender's header differs.
  void recv(at::Tensor& tensor, int peer, const MessageLabel& label);

  // A value every rank reads: `set` by one rank, `get` blocks until it is there, or
  // fails as soon as a rank has called `abort`.
  virtual void set(const std::string& key, const std::string& value) = 0;
  virtual std::string get(const std::string& key) = 0;
  // This rank is failing: the others' waits on the store end with `why`. (Their
  // receives from it end when its process exits and its connections close.)
  virtual void abort(const std::string& why) = 0;

 protected:
  // Transport: tagged messages between two ranks arrive in the order they were sent;
  // the returned wait holds `tensor` (the header is a temporary) until the send is done.
  virtual std::function<void()> send_raw(const at::Tensor& tensor, int peer, int tag) = 0;
  virtual void recv_raw(at::Tensor& tensor, int peer, int tag) = 0;
};

}  // namespace tiergen::runtime
