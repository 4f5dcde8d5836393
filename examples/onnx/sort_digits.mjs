// Sorts digits with the toy encoder that train_toy_encoder trained and exported, in ONNX Runtime
// for Node.js, without xgrad:
//
//   ./train_toy_encoder --export-onnx toy_encoder.onnx
//   npm install onnxruntime-node            # in the folder of this file
//   node sort_digits.mjs toy_encoder.onnx 3 1 4 1 5 9 2 6
//   1 1 2 3 4 5 6 9
//
// The model maps tokens (batch, 8) to logits (batch, 8, vocab); each output position's digit is
// its most likely token.
import * as ort from 'onnxruntime-node';

const [model, ...digits] = process.argv.slice(2);
if (!model || digits.length === 0) {
  console.error('usage: node sort_digits.mjs MODEL.onnx DIGIT...');
  process.exit(2);
}
const session = await ort.InferenceSession.create(model);
const tokens = new ort.Tensor('int64', BigInt64Array.from(digits.map(BigInt)), [1, digits.length]);
const { logits } = await session.run({ tokens });
const [, length, vocab] = logits.dims;
const sorted = [];
for (let i = 0; i < length; ++i) {
  const row = Array.from(logits.data.subarray(i * vocab, (i + 1) * vocab));
  sorted.push(row.indexOf(Math.max(...row)));
}
console.log(sorted.join(' '));
