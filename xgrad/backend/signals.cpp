#include <xgrad/backend/signals.hpp>

#include <pthread.h>

#include <initializer_list>

namespace xgrad::detail {

namespace {

struct ThreadState {
  bool blocked_for_life = false;
  bool blocked = false;  // by an AsyncSignalBlock, until its end or its scope's
  int scope_depth = 0;
  sigset_t previous;     // the mask to restore
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
}

void unblock(ThreadState& state) {
  pthread_sigmask(SIG_SETMASK, &state.previous, nullptr);
  state.blocked = false;
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

AsyncSignalScope::AsyncSignalScope() { ++t_state.scope_depth; }

AsyncSignalScope::~AsyncSignalScope() {
  ThreadState& state = t_state;
  if (--state.scope_depth == 0 && state.blocked) unblock(state);
}

}  // namespace xgrad::detail
