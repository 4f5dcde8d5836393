// transformers' no_init_weights (modeling_utils.py), which from_pretrained uses: while a
// NoInitWeights guard lives on this thread, nn::init's random draws (uniform_ and normal_, and
// through them xavier_uniform_ and kaiming_uniform_) leave their tensor as it is and draw nothing
// from the generator. A model built under the guard holds undrawn parameters, so build under it
// only what loads every parameter right after (models::load_hf_llama): the draws of a 1B model
// cost minutes. constant_, zeros_ and ones_ still write (cheap, and what transformers keeps).
//
//   {
//     nn::init::NoInitWeights no_init;
//     model = std::make_shared<LlamaForCausalLM<float>>(config);
//   }
//   model->load_state_dict(weights);
#pragma once

namespace xgrad::nn::init {

class NoInitWeights {
 public:
  NoInitWeights();
  ~NoInitWeights();  // restores the state it found (guards nest)
  NoInitWeights(const NoInitWeights&) = delete;
  NoInitWeights& operator=(const NoInitWeights&) = delete;

 private:
  bool previous_;
};

// False while a NoInitWeights guard lives on this thread.
bool init_weights_enabled();

}  // namespace xgrad::nn::init
