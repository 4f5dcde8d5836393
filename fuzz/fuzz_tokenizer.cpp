// libFuzzer target for GPT-2's tokenizer (xgrad/text). Every input is
//  - text: encoded with and without special tokens by a small byte-level BPE tokenizer (trained at
//    start-up on a fixed text, so that merges of every kind apply) and decoded back, which must
//    give the input's bytes exactly, valid UTF-8 or not;
//  - a file: read as vocab.bpe (beside that tokenizer's encoder.json), as encoder.json (beside its
//    vocab.bpe), as both (split at the first NUL byte) and as tokenizer.json, also through
//    Tokenizer::from_json (a character tokenizer's file too, any BPE one as HFTokenizer). A malformed file must throw
//    xgrad::FormatError; a file that loads must round-trip the input as text too;
//  - a Hugging Face tokenizer.json (HFTokenizer, any model the file describes): refused with
//    FormatError, or it loads and encodes and decodes a fixed text (PCRE2 giving up on a pattern
//    of the file, std::runtime_error, and Replace steps refused for growing a text past 64x,
//    std::invalid_argument, are outcomes too).
// Anything else (another exception, a crash, a sanitizer report, a leak, a hang) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include <xgrad/serialize/format_error.hpp>
#include <xgrad/text/bpe.hpp>
#include <xgrad/text/bpe_trainer.hpp>
#include <xgrad/text/tokenizer.hpp>
#include <xgrad/text/tokenizer_json.hpp>

namespace {

using xgrad::text::BPETokenizer;

const BPETokenizer& trained() {
  static const BPETokenizer tok = [] {
    xgrad::text::BPETrainer trainer(xgrad::text::BPETrainerOptions(600).special_tokens({"<|endoftext|>", "<|pad|>"}));
    trainer.add(
        "In the beginning God created the heaven and the earth. And the earth was without form, and void; "
        "and darkness was upon the face of the deep.\n\tI'm sure they'll say it's fine: 12,345.67 + 890 = ?\n"
        "caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80\xf0\x9f\x98\x80   spaces   \n\n"
        "bytes \xff\xfe\x80 and \xc3 more aaaaaaaa bbbb abab <|endoftext|> {\"json\": [1, 2]}");
    return trainer.train();
  }();
  return tok;
}

void round_trip(const BPETokenizer& tok, std::string_view text) {
  if (tok.decode(tok.encode(text)) != text) std::abort();
  if (tok.decode(tok.encode(text, xgrad::text::Special::all)) != text) std::abort();
}

template <class Load>
void load(std::string_view text, Load&& load_tokenizer) {
  try {
    const BPETokenizer tok = load_tokenizer();
    round_trip(tok, text);
  } catch (const xgrad::FormatError&) {
  }
}

void load_hf(std::string_view input) {
  std::unique_ptr<xgrad::text::HFTokenizer> tok;
  try {
    tok = std::make_unique<xgrad::text::HFTokenizer>(xgrad::text::HFTokenizer::from_json(input));
  } catch (const xgrad::FormatError&) {
    return;
  }
  const std::string_view text = "In the beginning, caf\xc3\xa9 \xf0\x9f\x98\x80 <|endoftext|> <s>  x\n\n";
  try {
    const std::vector<std::int64_t> ids = tok->encode(text, true);
    tok->decode(ids, false);
    tok->decode(ids, true);
  } catch (const std::runtime_error&) {     // a resource limit of PCRE2 on the file's pattern
  } catch (const std::invalid_argument&) {  // Replace steps that grow the text past 64x
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const BPETokenizer& tok = trained();
  round_trip(tok, input);
  static const std::string encoder_json = tok.encoder_json(), vocab_bpe = tok.vocab_bpe();
  load(input, [&] { return BPETokenizer::from_json_and_merges(encoder_json, input); });
  load(input, [&] { return BPETokenizer::from_json_and_merges(input, vocab_bpe); });
  const std::size_t nul = input.find('\0');
  if (nul != std::string_view::npos)
    load(input, [&] { return BPETokenizer::from_json_and_merges(input.substr(0, nul), input.substr(nul + 1)); });
  load(input, [&] { return BPETokenizer::from_tokenizer_json_bytes(input); });
  try {
    const xgrad::text::Tokenizer any = xgrad::text::Tokenizer::from_json(input);
    std::size_t skipped = 0;
    try {
      any.decode(any.encode(input, &skipped));  // every id encode gives is decodable (Utf8Error: a FormatError)
    } catch (const std::runtime_error&) {       // HFTokenizer's outcomes, as in load_hf
      if (!any.as_hf()) throw;
    } catch (const std::invalid_argument&) {
      if (!any.as_hf()) throw;
    }
  } catch (const xgrad::FormatError&) {
  }
  load_hf(input);
  return 0;
}
