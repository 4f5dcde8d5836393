#include <xgrad/backend/signals.hpp>
#include <xgrad/backend/batch.hpp>

#include <pthread.h>

#include <cstdint>
#include <initializer_list>

namespace xgrad::detail {

namespace {

struct ThreadState {
  bool blocked_for_life = false;
  bool blocked = false;  // by an AsyncSignalBlock, until its end or its scope's
  int scope_depth = 0;
  sigset_t previous;     // the mask to restore
  std::uint64_t blocks = 0;  // pthread_sigmask pairs begun (for tests)
};
thread_local ThreadState t_state;

sigset_t async_signals() {
  sigset_t set;
  sigfillset(&set);
  for (int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) sigdelset(&set, fault);
  return set;
}

void block(ThreadState& state) {
  static const sigset_t set = async_signals();
  state.blocked = pthread_sigmask(SIG_BLOCK, &set, &state.previous) == 0;
  ++state.blocks;
}

void unblock(ThreadState& state) {
  pthread_sigmask(SIG_SETMASK, &state.previous, nullptr);
  state.blocked = false;
}

void enter_scope() { ++t_state.scope_depth; }

void leave_scope() {
  ThreadState& state = t_state;
  if (--state.scope_depth == 0 && state.blocked) unblock(state);
}

}  // namespace

void block_async_signals_for_this_thread() {
  const sigset_t set = async_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  t_state.blocked_for_life = true;
}

AsyncSignalBlock::AsyncSignalBlock() {
  ThreadState& state = t_state;
  if (state.blocked_for_life || state.blocked) return;
  block(state);
  owner_ = state.blocked && state.scope_depth == 0;  // else the enclosing scope unblocks
}

AsyncSignalBlock::~AsyncSignalBlock() {
  if (owner_) unblock(t_state);
}

AsyncSignalScope::AsyncSignalScope() { enter_scope(); }
AsyncSignalScope::~AsyncSignalScope() { leave_scope(); }

// A batch's setup is the signal block: a batch is a scope.
BackendBatch::BackendBatch() { enter_scope(); }
BackendBatch::~BackendBatch() { leave_scope(); }

std::uint64_t async_signal_blocks_on_this_thread() { return t_state.blocks; }

}  // namespace xgrad::detail
