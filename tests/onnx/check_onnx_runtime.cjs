// Runs models in ONNX Runtime (onnxruntime-node) on the inputs of CASE.json files and compares
// the outputs with the ones xgrad computed (stored beside them): each element within 1e-5 of
// max(1, |xgrad's value|). Prints the largest difference per case and overall.
//
//   node check_onnx_runtime.cjs ONNXRUNTIME_NODE_DIR CASE.json...
'use strict';
const fs = require('fs');
const path = require('path');

const [ortDir, ...cases] = process.argv.slice(2);
const ort = require(path.resolve(ortDir));
const tolerance = 1e-5;

function toTensor(v) {
  const dims = v.dims;
  if (v.type === 'float32') return new ort.Tensor('float32', Float32Array.from(v.data), dims);
  if (v.type === 'int64') return new ort.Tensor('int64', BigInt64Array.from(v.data.map(BigInt)), dims);
  if (v.type === 'bool') return new ort.Tensor('bool', Uint8Array.from(v.data.map(Number)), dims);
  throw new Error(`unknown input type ${v.type}`);
}

async function main() {
  if (cases.length === 0) throw new Error('no case given');
  let worst = 0;
  let failed = false;
  for (const file of cases) {
    const spec = JSON.parse(fs.readFileSync(file, 'utf8'));
    const session = await ort.InferenceSession.create(path.join(path.dirname(file), spec.model));
    let caseWorst = 0;
    let bad = 0;  // elements beyond the tolerance (the first few are printed)
    const shapes = [];
    for (const run of spec.runs) {
      const feeds = {};
      for (const [name, v] of Object.entries(run.inputs)) feeds[name] = toTensor(v);
      const got = await session.run(feeds);
      shapes.push(Object.values(run.inputs).map((v) => v.dims.join('x')).join(' '));
      for (const [name, want] of Object.entries(run.outputs)) {
        const out = got[name];
        if (out === undefined) throw new Error(`${file}: ONNX Runtime gave no output '${name}'`);
        if (out.dims.join(',') !== want.dims.join(',')) {
          console.log(`FAIL ${file} ${name}: shape ${out.dims} instead of ${want.dims}`);
          ++bad;
          continue;
        }
        for (let i = 0; i < want.data.length; ++i) {
          const d = Math.abs(out.data[i] - want.data[i]) / Math.max(1, Math.abs(want.data[i]));
          if (!(d <= tolerance) && bad++ < 5) console.log(`FAIL ${file} ${name}[${i}]: ${out.data[i]}, xgrad ${want.data[i]}`);
          if (!(d <= caseWorst)) caseWorst = d;  // NaN included
        }
      }
    }
    await session.release();  // a thousand sessions held at once crash the process
    const verdict = bad ? 'FAIL' : 'ok';
    console.log(`${verdict} ${path.basename(file, '.json')}: inputs ${shapes.join(' | ')}, ` +
                `largest difference ${caseWorst.toExponential(2)}`);
    failed = failed || bad > 0;
    worst = Math.max(worst, caseWorst);
  }
  console.log(`largest difference over all cases: ${worst.toExponential(2)} (tolerance ${tolerance})`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(`FAIL: ${e.message}`);
  process.exit(1);
});
