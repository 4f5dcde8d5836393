// The npm package gpt-3-encoder (GPT-2's encoder.py ported to JavaScript) encoding the same text
// as bench_tokenizer, line by line (its encode() appends with Array.concat, quadratic in the
// length of one call: the whole KJV in one call does not finish in 10 minutes): the first pass
// (empty cache) and the median of the repeats.
//
//   npm install --prefix /tmp/gpt3enc gpt-3-encoder@1.1.4
//   COLUMNS=1000 bible "gen1:1-rev22:21" > /tmp/kjv.txt
//   NODE_PATH=/tmp/gpt3enc/node_modules node benchmarks/tokenizer_npm.cjs /tmp/kjv.txt [REPEATS] [IDS_OUT]
const fs = require('fs');
const { encode } = require('gpt-3-encoder');

const [file, repeatsArg, idsOut] = process.argv.slice(2);
if (!file) {
  console.error('usage: node tokenizer_npm.cjs TEXT_FILE [REPEATS] [IDS_OUT]');
  process.exit(2);
}
const bytes = fs.readFileSync(file);
const text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
const repeats = Number(repeatsArg || 2);
const lines = text.split('\n');
const encodeLines = () => {
  const ids = [];
  for (const line of lines) for (const id of encode(line)) ids.push(id);
  return ids;
};
let t0 = process.hrtime.bigint();
const ids = encodeLines();
const first = Number(process.hrtime.bigint() - t0) / 1e9;
const warm = [];
for (let r = 0; r < repeats; r++) {
  t0 = process.hrtime.bigint();
  encodeLines();
  warm.push(Number(process.hrtime.bigint() - t0) / 1e9);
}
warm.sort((a, b) => a - b);
const median = warm[Math.floor(warm.length / 2)];
console.log(JSON.stringify({ bench: 'gpt-3-encoder', node: process.version, bytes: bytes.length, tokens: ids.length,
                             first_encode_s: first, encode_s: median, encode_mb_per_s: bytes.length / 1e6 / median }));
if (idsOut) fs.writeFileSync(idsOut, JSON.stringify(ids) + '\n');
