#include <xgrad/autograd/signals.hpp>

#include <pthread.h>

#include <initializer_list>

namespace xgrad::detail {

namespace {

thread_local bool t_blocked_for_life = false;

sigset_t async_signals() {
  sigset_t set;
  sigfillset(&set);
  for (int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) sigdelset(&set, fault);
  return set;
}

}  // namespace

void block_async_signals_for_this_thread() {
  const sigset_t set = async_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  t_blocked_for_life = true;
}

AsyncSignalBlock::AsyncSignalBlock() {
  if (t_blocked_for_life) return;
  static const sigset_t set = async_signals();
  active_ = pthread_sigmask(SIG_BLOCK, &set, &previous_) == 0;
}

AsyncSignalBlock::~AsyncSignalBlock() {
  if (active_) pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

}  // namespace xgrad::detail
