#pragma once
// A point in a stream's queued work. A loader records one after it has queued a
// transfer on its own stream; the compute thread makes the compute stream wait on it
// before using the data. That orders the two streams on the device without any host
// wait (FlexGen instead synchronizes the whole device after every step).
//
// On the CPU there is nothing queued: an event is always complete, and the host
// futures of the workers carry all the ordering. Under async emulation
// (emulated_stream.h) an event recorded on a worker's emulated stream completes when
// that stream reaches it.
#include <memory>

#include "tiergen/runtime/device.h"

namespace tiergen::runtime {

class DeviceEvent {
 public:
  DeviceEvent() = default;  // complete: there is nothing to wait for

  // Records the work queued so far on the calling thread's current stream of `device`.
  static DeviceEvent record(const DeviceContext& device);

  // Makes the calling thread's current stream wait for the recorded work; the host
  // does not block (a thread without a stream of its own, emulated, blocks instead).
  void make_current_stream_wait(const DeviceContext& device) const;

 private:
  struct Handle;
  std::shared_ptr<Handle> handle_;
};

}  // namespace tiergen::runtime
