// Prints text from the character-level GPT that train_gpt trained and exported, in ONNX Runtime for
// Node.js, without xgrad:
//
//   ./train_gpt --export-onnx gpt.onnx      # also writes gpt.onnx.vocab.json
//   npm install onnxruntime-node            # in the folder of this file
//   node gpt_sample.mjs gpt.onnx "In the beginning" 200              # greedy (argmax)
//   node gpt_sample.mjs gpt.onnx "In the beginning" 200 0.8 42       # temperature 0.8, seed 42
//
// The model maps idx (batch, seq) int64 to logits (batch, seq, vocab); each new character is
// drawn from the last position's logits given the last block_size characters (nanoGPT's crop).
import * as ort from 'onnxruntime-node';
import { readFileSync } from 'node:fs';

const [model, prompt = '\n', count = '100', temperature, seed = '1'] = process.argv.slice(2);
if (!model) {
  console.error('usage: node gpt_sample.mjs MODEL.onnx [PROMPT] [TOKENS] [TEMPERATURE SEED]');
  process.exit(2);
}
const { block_size: blockSize, vocab } = JSON.parse(readFileSync(`${model}.vocab.json`, 'utf8'));
const index = new Map(vocab.map((ch, i) => [ch, i]));
const tokens = [...prompt].map((ch) => {
  if (!index.has(ch)) throw new Error(`the prompt's character ${JSON.stringify(ch)} is not in the vocabulary`);
  return index.get(ch);
});

// mulberry32: a small seeded generator of uniform numbers in [0, 1)
let state = Number(seed) >>> 0;
function uniform() {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}

const session = await ort.InferenceSession.create(model);
for (let n = 0; n < Number(count); ++n) {
  const context = tokens.slice(-blockSize);
  const idx = new ort.Tensor('int64', BigInt64Array.from(context.map(BigInt)), [1, context.length]);
  const { logits } = await session.run({ idx });
  const V = logits.dims[2];
  const last = logits.data.subarray((context.length - 1) * V, context.length * V);
  let next = 0;
  if (temperature === undefined) {  // greedy: the first largest logit
    for (let i = 1; i < V; ++i) if (last[i] > last[next]) next = i;
  } else {  // softmax(logits / temperature), then one draw
    const scaled = Array.from(last, (x) => x / Number(temperature));
    const top = Math.max(...scaled);
    const weights = scaled.map((x) => Math.exp(x - top));
    let u = uniform() * weights.reduce((a, b) => a + b, 0);
    next = V - 1;
    for (let i = 0; i < V; ++i) if ((u -= weights[i]) < 0) { next = i; break; }
  }
  tokens.push(next);
}
console.log(tokens.map((t) => vocab[t]).join(''));
