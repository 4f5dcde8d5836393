// The Trainer's data parallelism, header-only, for a program that trains under `mpirun -np N`
// when built with MPI (XGRAD_WITH_MPI, a program linking xgrad::train_mpi) and as one process
// otherwise, with the same code (in main()):
// compile: snippet given: train::Settings settings; train::TrainerOptions options; Tensor<float> x, y;
//   const auto world = train::launched_world();  // until main() returns
//   train::Trainer trainer("my_program", options, settings, *world);
//   trainer.seed_everything(0);
//   auto model = std::make_shared<nn::Linear<float>>(8, 2);
//   train::DataParallel<nn::Linear<float>> forward(model, *world);  // DDP over the ranks, if several
//   optim::AdamW<float> optimizer(model->parameters(), optim::AdamWOptions(1e-3));
//   trainer.fit(*model, optimizer, nullptr, [&](int) { return mse_loss(forward(x), y); },
//               [&] { return mse_loss(forward(x), y).item(); });
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include <xgrad/train/world.hpp>
#ifdef XGRAD_WITH_MPI
#include <xgrad/distributed/ddp.hpp>
#include <xgrad/train/mpi_world.hpp>
#endif

namespace xgrad::train {

// The World the launcher started: an MPIWorld under mpirun -np N > 1 in a build with MPI (the
// process group initialized until it is destroyed), else the world of one process (a program
// started by mpirun -np N > 1 without MPI is then refused by the Trainer).
inline std::unique_ptr<World> launched_world() {
#ifdef XGRAD_WITH_MPI
  return make_world();
#else
  return std::make_unique<World>();
#endif
}

// The forward of `module` in `world`: through DistributedDataParallel in a world of several
// ranks (its construction makes rank 0's weights everyone's; the backward averages the gradients
// over the ranks), the module's own otherwise. The class has one layout whether or not the
// program is built with MPI (only the constructor's body differs), so translation units built
// either way agree on it.
template <class M>
class DataParallel {
 public:
  DataParallel(std::shared_ptr<M> module, World& world) : module_(std::move(module)) {
#ifdef XGRAD_WITH_MPI
    if (world.size() > 1) {
      // The hook owns the DistributedDataParallel (its reducer's gradient hooks live as long).
      auto ddp = std::make_shared<xgrad::distributed::DistributedDataParallel<M>>(module_);
      before_forward_ = [ddp] { ddp->prepare_for_forward(); };
    }
#else
    (void)world;
#endif
  }

  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    if (before_forward_) before_forward_();
    return module_->forward(std::forward<Args>(args)...);
  }

  M& module() const { return *module_; }

 private:
  std::shared_ptr<M> module_;
  // Several ranks: DistributedDataParallel's prepare_for_forward (its module is module_); else empty.
  std::function<void()> before_forward_;
};

}  // namespace xgrad::train
