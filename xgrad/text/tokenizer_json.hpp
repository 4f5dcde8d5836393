// A Hugging Face tokenizer.json, run as Hugging Face's tokenizers library (the Rust code behind
// transformers' fast tokenizers) runs it: the BPE models of Llama 3, Qwen2 and SmolLM2 (byte-level)
// and of Llama 2, TinyLlama and Mistral (SentencePiece-style, with byte fallback).
//
//   auto tok = xgrad::text::HFTokenizer::from_file("Llama-3.2-1B/tokenizer.json");
//   std::vector<std::int64_t> ids = tok.encode("Hello world");        // {128000, 9906, 1917}: BOS first
//   tok.encode("Hello world", /*add_special_tokens=*/false);          // {9906, 1917}
//   std::string text = tok.decode(ids, /*skip_special_tokens=*/true); // "Hello world"
//
// encode: added tokens are cut out of the text first (leftmost, then longest; `normalized: false`
// ones from the raw text, `normalized: true` ones from each normalized piece; one with lstrip /
// rstrip takes the white space before / after it, one with single_word is passed over where a
// word character touches it), whatever add_special_tokens says; each remaining piece goes through the normalizer, the
// pre-tokenizer and the BPE model; with add_special_tokens the post-processor's template adds BOS/EOS. decode: each
// id's token (added ones included, special ones left out with skip_special_tokens) through the
// decoder. What is read (anything else in the file is refused by name, see docs/text.md):
//
//   normalizer     null, Sequence, Prepend, Replace (String or Regex), NFC, NFD, NFKC, NFKD (utf8proc)
//   pre_tokenizer  null, Sequence, Split (String or Regex; every behavior; invert),
//                  ByteLevel (add_prefix_space, use_regex: GPT-2's pattern), Metaspace
//                  (replacement, prepend_scheme always/first/never, split)
//   model          BPE: vocab, merges ("a b" or ["a", "b"]), ignore_merges, byte_fallback (<0xNN>),
//                  unk_token, fuse_unk; dropout, continuing_subword_prefix and end_of_word_suffix
//                  only when unset
//   post_processor null, Sequence, ByteLevel (no ids), TemplateProcessing (the single template)
//   decoder        null, Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace
//   added_tokens   content, id, special, normalized, lstrip, rstrip, single_word
//
// Text comes in as UTF-8 (as the library's Rust strings): bytes that are not are refused with
// Utf8Error. decode(encode(x)) == x whenever the tokenizer is lossless (every character has a
// token or a byte, and the normalizer changes nothing the decoder does not undo).
//
// A malformed or unsupported file throws xgrad::FormatError naming the file, the key path
// ("pre_tokenizer.pretokenizers[0].behavior") and what was expected; a missing file,
// std::runtime_error naming it. Thread safety: encode and decode may run on several threads at
// once (the cache of merged pieces is guarded); copies share everything, the cache included.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace xgrad::text {

namespace hf {
struct Pipeline;  // the file's steps, built once and shared by copies
}

class HFTokenizer {
 public:
  // At most 256 MiB of tokenizer.json are read (Llama 3's is 9 MB).
  static HFTokenizer from_file(const std::string& path);
  // The file's bytes; `name` stands for the file in messages.
  static HFTokenizer from_json(std::string_view bytes, const std::string& name = "tokenizer.json");
  // The file already parsed (parse_json of base/json_input.hpp), for a reader that looked at it first.
  static HFTokenizer from_parsed_json(const nlohmann::json& root, const std::string& name = "tokenizer.json");

  // add_special_tokens: the post-processor's special tokens (BOS ...), as the library's default.
  std::vector<std::int64_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // The tokens of encode(text, false), as strings (the library's Encoding.tokens: an added token
  // as the text it matched, " <mask>" for a <mask> with lstrip).
  std::vector<std::string> tokenize(std::string_view text) const;
  // An id that has no token throws std::invalid_argument naming it and its position.
  std::string decode(const std::vector<std::int64_t>& ids, bool skip_special_tokens = false) const;

  std::int64_t token_to_id(std::string_view token) const;  // -1 when absent
  // Throws for an id without a token. An added token with normalized: true comes in its
  // normalized form, as decode uses it ("▁Hello" for "Hello" after Llama 2's Prepend).
  const std::string& id_to_token(std::int64_t id) const;
  bool is_special(std::int64_t id) const;  // an added token with special: true
  // One past the largest id (model vocabulary and added tokens).
  std::size_t vocab_size() const;
  // The special tokens the post-processor's template puts before / after the text, -1 when none
  // (Llama 3: bos <|begin_of_text|>, no eos; tokenizer_config.json, not read here, names eos).
  std::int64_t bos_token_id() const;
  std::int64_t eos_token_id() const;

 private:
  explicit HFTokenizer(std::shared_ptr<const hf::Pipeline> pipeline) : pipeline_(std::move(pipeline)) {}
  std::shared_ptr<const hf::Pipeline> pipeline_;
};

}  // namespace xgrad::text
