// Hugging Face's tokenizers library (the npm package `tokenizers`, the Rust library's Node
// binding) encoding a whole text in one call with a tokenizer.json, as bench_tokenizer_json does
// with xgrad's HFTokenizer, which runs this script in the same run: the first encode (a fresh
// tokenizer: empty cache of merged words) and the median of the repeats. Prints one JSON line
// with the token count and an FNV-1a hash of the ids, which bench_tokenizer_json compares with its
// own.
//
//   npm install --prefix /tmp/hf_tokenizers tokenizers@0.23.2
//   NODE_PATH=/tmp/hf_tokenizers/node_modules node benchmarks/tokenizer_json_npm.cjs TOKENIZER_JSON TEXT_FILE [REPEATS]
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

async function main() {
  const [tokenizerPath, file, repeatsArg] = process.argv.slice(2);
  if (!tokenizerPath || !file) {
    console.error('usage: node tokenizer_json_npm.cjs TOKENIZER_JSON TEXT_FILE [REPEATS]');
    process.exit(2);
  }
  const text = new TextDecoder('utf-8', { fatal: true }).decode(fs.readFileSync(file));
  const repeats = Number(repeatsArg || 3);
  const tok = Tokenizer.fromFile(tokenizerPath);
  const encode = async () => (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
  let t0 = process.hrtime.bigint();
  const ids = await encode();
  const first = Number(process.hrtime.bigint() - t0) / 1e9;
  const warm = [];
  for (let r = 0; r < repeats; r++) {
    t0 = process.hrtime.bigint();
    await encode();
    warm.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  warm.sort((a, b) => a - b);
  let hash = 0xcbf29ce484222325n;  // FNV-1a over the ids as little-endian uint32
  for (const id of ids) {
    for (let k = 0; k < 4; k++) {
      hash ^= BigInt((id >>> (8 * k)) & 0xff);
      hash = (hash * 0x100000001b3n) & 0xffffffffffffffffn;
    }
  }
  const version = require('tokenizers/package.json').version;
  console.log(JSON.stringify({ bench: 'npm tokenizers', version, node: process.version, tokens: ids.length,
                               ids_fnv1a: hash.toString(16), first_encode_s: first,
                               encode_s: warm[Math.floor(warm.length / 2)] }));
}
main().catch((e) => { console.error(e); process.exit(1); });
