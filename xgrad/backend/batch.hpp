// Internal: a run of backend calls made as one unit.
//
// Code above the backend that makes many small kernel calls in a row (a transformer layer's
// forward: its projections, its attention, its feed-forward) opens a BackendBatch around them;
// the backend then pays the setup it needs around some calls once for the whole run, at the first
// call that needs it, instead of once per call. What that setup is stays the backend's business:
// today the asynchronous-signal block around every oneDNN call (signals.hpp), two system calls
// that cost as much as a small gemm on a virtual machine. A batch in which no call needs a setup
// costs nothing; batches nest (the outermost one ends the run). The autograd engine's backward
// pass and each parallel_for job are batches of their own.
#pragma once

namespace xgrad::detail {

class BackendBatch {
 public:
  BackendBatch();
  ~BackendBatch();
  BackendBatch(const BackendBatch&) = delete;
  BackendBatch& operator=(const BackendBatch&) = delete;
};

}  // namespace xgrad::detail
