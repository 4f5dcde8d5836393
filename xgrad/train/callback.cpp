#include "callback.hpp"

namespace xgrad::train {

void Callback::on_train_batch_end(Trainer&, int, double) {}
void Callback::on_validation_end(Trainer&, const Metrics&) {}
void Callback::on_save_checkpoint(Trainer&, std::map<std::string, std::string>&) {}
void Callback::on_fit_end(Trainer&) {}

void LambdaCallback::on_train_batch_end(Trainer& trainer, int step, double loss) {
  if (train_batch_end) train_batch_end(trainer, step, loss);
}
void LambdaCallback::on_validation_end(Trainer& trainer, const Metrics& metrics) {
  if (validation_end) validation_end(trainer, metrics);
}
void LambdaCallback::on_save_checkpoint(Trainer& trainer, std::map<std::string, std::string>& metadata) {
  if (save_checkpoint) save_checkpoint(trainer, metadata);
}
void LambdaCallback::on_fit_end(Trainer& trainer) {
  if (fit_end) fit_end(trainer);
}

}  // namespace xgrad::train
