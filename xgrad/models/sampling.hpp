// Choosing the next token of a language model from its logits, as nanoGPT's generate() and
// Hugging Face's generate(do_sample=True) do: temperature, then top-k, then top-p (nucleus)
// filtering, softmax, and one multinomial draw; or greedy argmax.
//
// compile: snippet given: Tensor<float> logits = randn<float>({2, 50}); Generator generator(7);
//   xgrad::SamplingOptions options;
//   options.temperature = 0.8;
//   options.top_k = 40;
//   IndexArray next = xgrad::sample_next_token(logits, options, &generator);  // (N)
//
// The ops it is built on (topk, argmax, multinomial, ...) are declared in ops.hpp.
#pragma once

#include <cstdint>

#include <xgrad/base/random.hpp>
#include <xgrad/core/tensor.hpp>

namespace xgrad {

struct SamplingOptions {
  double temperature = 1.0;  // divides the logits; > 0 (argmax decoding is `greedy`, not 0)
  std::int64_t top_k = 0;    // keep the top_k largest logits (and ties with the k-th); 0 = off
  double top_p = 1.0;        // keep the smallest most-probable set reaching top_p; in (0, 1], 1 = off
  bool greedy = false;       // argmax of the logits (first on ties); the fields above are then
                             // unused (but still checked)

  // Throws std::invalid_argument naming the bad field and its allowed range.
  void check() const;
};

// logits: (V), (N, V), or (N, L, V) (then only the last position, L - 1, is used) -> token ids
// (N), (1) for (V). Per row: s = logits / temperature; top_k > 0 sets every s below the k-th
// largest to -inf (top_k >= V keeps all); p = softmax(s); top_p < 1 keeps, in descending p (equal
// p by index), the shortest prefix whose sum is >= top_p (always at least the most likely token)
// and zeroes the rest; one multinomial draw from p with `generator` (the default one when null).
// greedy: argmax of the logits. Reads only the values: no graph is built, whatever the grad mode.
// Logits that are NaN or +inf, or a row that is all -inf, throw; so do bad options (check()).
template <class T>
IndexArray sample_next_token(const Tensor<T>& logits, const SamplingOptions& options, Generator* generator = nullptr);

}  // namespace xgrad
