#include "tiergen/runtime/stage_link.h"

#include <fmt/format.h>

#include "tiergen/common/error.h"

namespace tiergen::runtime {

namespace {

constexpr int64_t kHeaderSize = 7;
constexpr int64_t kMagic = 0x7469657267656e;  // "tiergen": a message from this protocol

// One tag per (group, kind): the messages of one tag between two ranks stay in order.
// Probes have a tag of their own, above every group's.
constexpr int kProbeTag = 1 << 24;
int tag_of(const MessageLabel& label) {
  if (label.kind == MessageLabel::Probe) return kProbeTag;
  return static_cast<int>(label.group * 2 + (label.kind == MessageLabel::Feedback));
}

at::Tensor header_of(const MessageLabel& label, const at::Tensor& payload) {
  at::Tensor h = at::empty({kHeaderSize}, at::kLong);
  auto* v = h.data_ptr<int64_t>();
  v[0] = kMagic;
  v[1] = label.kind;
  v[2] = label.group;
  v[3] = label.token;
  v[4] = label.batch;
  v[5] = payload.numel();
  v[6] = static_cast<int64_t>(payload.element_size());
  return h;
}

std::string kind_name(int64_t kind) {
  if (kind == MessageLabel::Hidden) return "hidden states";
  if (kind == MessageLabel::Feedback) return "sampled tokens";
  if (kind == MessageLabel::Probe) return "link probe";
  return fmt::format("unknown message kind {}", kind);
}

}  // namespace

std::string MessageLabel::describe() const {
  if (kind == Probe) return fmt::format("link probe {} of hop {} round {}", batch == 0 ? "ping" : "payload", group, token);
  return kind == Hidden ? fmt::format("hidden states of group {} token {} batch {}", group, token, batch)
                        : fmt::format("sampled tokens of group {} token {}", group, token);
}

namespace {

// A failed send, whether the transport refuses it at once (a connection it already
// knows is closed) or while it completes, names the peer and the message.
[[noreturn]] void throw_send_failed(int self, const MessageLabel& label, int peer, const std::exception& e) {
  TG_THROW("rank {}: sending {} to rank {} failed (did rank {} exit?): {}", self, label.describe(), peer, peer, e.what());
}

[[noreturn]] void throw_receive_failed(int self, const MessageLabel& label, int peer, const std::exception& e) {
  TG_THROW("rank {}: receiving {} from rank {} failed (did rank {} exit?): {}", self, label.describe(), peer, peer,
           e.what());
}

}  // namespace

std::function<void()> StageLink::send(const at::Tensor& tensor, int peer, const MessageLabel& label) {
  TG_CHECK(tensor.device().is_cpu() && tensor.is_contiguous(), "internal: pipeline messages are contiguous host tensors");
  const int tag = tag_of(label);
  std::function<void()> header_sent, payload_sent;
  try {
    header_sent = send_raw(header_of(label, tensor), peer, tag);
    payload_sent = send_raw(tensor, peer, tag);
  } catch (const std::exception& e) {
    throw_send_failed(rank(), label, peer, e);
  }
  return [header_sent, payload_sent, peer, label, self = rank()] {
    try {
      header_sent();
      payload_sent();
    } catch (const std::exception& e) {
      throw_send_failed(self, label, peer, e);
    }
  };
}

void StageLink::recv(at::Tensor& tensor, int peer, const MessageLabel& label) {
  TG_CHECK(tensor.device().is_cpu() && tensor.is_contiguous(), "internal: pipeline messages are contiguous host tensors");
  const int tag = tag_of(label);
  at::Tensor header = at::zeros({kHeaderSize}, at::kLong);
  try {
    recv_raw(header, peer, tag);
  } catch (const std::exception& e) {
    throw_receive_failed(rank(), label, peer, e);
  }
  const auto* h = header.data_ptr<int64_t>();
  TG_CHECK(h[0] == kMagic, "rank {}: rank {} sent a message that is not a tiergen pipeline message where {} was expected",
           rank(), peer, label.describe());
  const MessageLabel got{static_cast<MessageLabel::Kind>(h[1]), h[2], h[3], h[4]};
  const bool same = got.kind == label.kind && got.group == label.group && got.token == label.token &&
                    got.batch == label.batch && h[5] == tensor.numel();
  TG_CHECK(same, "rank {}: expected {} ({} values) from rank {}, but it sent {} ({} values, {}): the ranks disagree on "
           "the schedule (different prompts, flags or model?)", rank(), label.describe(), tensor.numel(), peer,
           got.kind >= MessageLabel::Hidden && got.kind <= MessageLabel::Probe ? got.describe() : kind_name(got.kind),
           h[5], kind_name(got.kind));
  TG_CHECK(h[6] == static_cast<int64_t>(tensor.element_size()), "rank {}: rank {} sent {} as {}-byte values where "
           "{}-byte values were expected: the ranks compute in different dtypes; give every rank the same --dtype",
           rank(), peer, label.describe(), h[6], tensor.element_size());
  try {
    recv_raw(tensor, peer, tag);
  } catch (const std::exception& e) {
    throw_receive_failed(rank(), label, peer, e);
  }
}

}  // namespace tiergen::runtime
