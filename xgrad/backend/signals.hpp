// Internal: asynchronous signals held back from code a signal handler must not interrupt.
//
// oneDNN 2.6's jit f32 gemm kernels (and possibly others) point the stack pointer into a heap
// workspace while they run. A signal handled on that thread pushes its frame there and corrupts
// the heap, whatever the handler does. So every call into oneDNN runs with the asynchronous
// signals blocked on its thread: a signal that arrives meanwhile stays pending and is delivered
// as soon as the call returns, so no handler ever misses one, it only runs a few microseconds
// later. The synchronous signals that report a fault of the thread itself (SIGSEGV, SIGBUS,
// SIGFPE, SIGILL, SIGTRAP, SIGSYS) are never blocked.
#pragma once

#include <signal.h>

#include <cstdint>

namespace xgrad::detail {

// Blocks the asynchronous signals on the calling thread for the rest of its life. The pool's
// workers call it when they start: the process's signals (Ctrl-C's SIGINT, timers, profilers)
// then go to the user's own threads, and a worker's calls into oneDNN need no guard.
void block_async_signals_for_this_thread();

// Blocks the asynchronous signals on the calling thread for its lifetime, then restores the
// thread's mask: two system calls, none on a thread that blocks them for life or already blocks
// them. Inside an AsyncSignalScope the signals stay blocked until the scope ends instead.
class AsyncSignalBlock {
 public:
  AsyncSignalBlock();
  ~AsyncSignalBlock();
  AsyncSignalBlock(const AsyncSignalBlock&) = delete;
  AsyncSignalBlock& operator=(const AsyncSignalBlock&) = delete;

 private:
  bool owner_ = false;
};

// A kernel that may call oneDNN many times (a split gemm, the attention heads: parallel_for's
// jobs; the engine's backward pass) runs in a scope, so that it pays the two system calls once, at
// its first oneDNN call and at its end, rather than per call: on a virtual machine a pair costs
// 1-5 us, as much as a small gemm. A scope that calls no oneDNN costs no system call. Scopes nest.
// Code above the backend asks for the same through a BackendBatch (batch.hpp), which names no
// signal: a batch is a scope.
class AsyncSignalScope {
 public:
  AsyncSignalScope();
  ~AsyncSignalScope();
  AsyncSignalScope(const AsyncSignalScope&) = delete;
  AsyncSignalScope& operator=(const AsyncSignalScope&) = delete;
};

// For tests: how many times the calling thread has blocked the asynchronous signals for a
// oneDNN call (one pthread_sigmask pair each).
std::uint64_t async_signal_blocks_on_this_thread();

}  // namespace xgrad::detail
