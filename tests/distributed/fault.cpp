// A training-like loop in which one rank fails, for the fault tests (run_fault.cmake):
//   fault throw  - rank 1 throws an exception nobody catches; the terminate handler installed
//                  by init_process_group prints it and calls MPI_Abort.
//   fault kill   - rank 1 is killed with SIGKILL; mpirun notices and ends the job.
// Meanwhile rank 0 waits in an all-reduce that rank 1 never joins: without the job being ended
// it would hang forever. Only a run that is ended (non-zero exit, the reason in the output)
// within the test's timeout passes.
#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <string>

#include <xgrad/distributed/distributed.hpp>

namespace dist = xgrad::distributed;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "throw" && mode != "kill") {
    std::fprintf(stderr, "usage: fault throw|kill\n");
    return 2;
  }
  dist::init_process_group();
  auto t = xgrad::ones<double>({16});
  for (int step = 0;; ++step) {
    if (dist::get_rank() == 1 && step == 3) {
      std::fprintf(stderr, "rank 1: failing at step %d (%s)\n", step, mode.c_str());
      std::fflush(stderr);
      if (mode == "kill") std::raise(SIGKILL);
      throw std::runtime_error("injected failure on rank 1 at step 3");
    }
    dist::all_reduce(t, dist::ReduceOp::AVG);
  }
}
