#!/usr/bin/env bash
# ctest's check of finetune_gpt2 on the tiny Hugging Face GPT-2 fixture (tests/fixtures/hf-gpt2-tiny:
# 2 layers, n_embd 64, vocab 384, random weights written by transformers). The fixture has no
# tokenizer files, so the program trains a byte-level BPE tokenizer of 384 ids (its ids fit the
# model's vocabulary) on Genesis 1:1-2:7 (tests/fixtures/genesis.txt, King James Version, public
# domain), about 4.9 KB.
#   1. --train-tokenizer 384 writes encoder.json + vocab.bpe;
#   2. 40 steps of fine-tuning: the loss in the CSV is finite and falls; a sample is printed;
#   3. a run stopped at step 20 and resumed ends with the same weights bit for bit and the same CSV;
#      the finished run resumed with no larger --iters trains nothing and rewrites neither its
#      checkpoint nor its CSV (its weights come from the checkpoint);
#   4. --save-hf writes a folder that loads (--hf OUT) and gives the same --greedy sample as the
#      model right after training;
#   5. --export-onnx writes a model (checked by onnx's checker and ONNX Runtime when XGRAD_ONNX_TOOLS
#      and XGRAD_ONNXRUNTIME are set, as test_train_gpt.sh);
#   6. bad input is refused with one line and a non-zero exit, before any training or writing;
#   7. special files (FIFOs, /dev/zero, /dev/urandom) and two flags naming one file (--tokens x --csv x,
#      --checkpoint naming --hf's model.safetensors) are refused at once, naming both flags, under a
#      timeout; nothing is written, no temporary or token file is left behind.
#
#   test_finetune_gpt2.sh PROGRAM WORKDIR FIXTURE
set -euo pipefail
program=$1
work=$2
fixture=$3
fixtures=$(cd "$(dirname "$0")/../tests/fixtures" && pwd)  # genesis.txt
rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
cp "$fixtures/genesis.txt" text.txt

echo "== 1. a BPE tokenizer of 384 ids"
"$program" --text text.txt --tokenizer tok --train-tokenizer 384
[[ -s tok/encoder.json && -s tok/vocab.bpe ]] || fail "no tokenizer written"

common=(--tokenizer tok --block-size 32 --batch-size 4 --iters 40 --warmup 5 --lr 0.003
        --eval-interval 10 --eval-iters 2 --checkpoint-interval 0)
flags=(--hf "$fixture" --text text.txt "${common[@]}")
echo "== 2. fine-tuning"
"$program" "${flags[@]}" --checkpoint full.ckpt --csv full.csv --save-weights full.safetensors --save-hf out \
  --sample 24 --prompt "And God said" --greedy | tee full.log
grep -q "^step,loss,val_loss,lr,elapsed$" full.csv || fail "the CSV has no val_loss column"
[[ $(tail -n 1 full.csv | cut -d, -f1) == 40 ]] || fail "the CSV does not end at step 40"
first=$(sed -n 2p full.csv | cut -d, -f2)
last=$(tail -n 1 full.csv | cut -d, -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a == a + 0 && b == b + 0 && b < a - 0.5) }' ||
  fail "the training loss went from $first to $last"
echo "training loss fell from $first to $last"
grep -q "^-- sample --$" full.log || fail "no sample printed"
[[ -s full.ckpt.tok ]] || fail "the text was not tokenized beside the checkpoint (full.ckpt.tok)"
sed -n '/^-- sample --$/,/^wall time:/p' full.log | sed '1d;$d' >sample_trained.txt
[[ $(head -c 12 sample_trained.txt) == "And God said" ]] || fail "the sample does not start with the prompt"

echo "== 3. stopped at step 20, then resumed"
"$program" "${flags[@]}" --checkpoint half.ckpt --csv half.csv --stop-at 20 >/dev/null
"$program" --resume half.ckpt --checkpoint half.ckpt --csv half.csv --save-weights half.safetensors >/dev/null
cmp full.safetensors half.safetensors || fail "the resumed run's weights differ"
diff <(cut -d, -f1-4 full.csv) <(cut -d, -f1-4 half.csv) || fail "the resumed run's CSV differs"
ls -l --time-style=+%s.%N full.ckpt full.csv >before_only.txt
"$program" --resume full.ckpt --checkpoint full.ckpt --csv full.csv --save-weights only.safetensors | tee only.log
grep -q "0 steps in this run" only.log || fail "resuming the finished run trained"
ls -l --time-style=+%s.%N full.ckpt full.csv | diff before_only.txt - || fail "resuming the finished run rewrote a file"
cmp full.safetensors only.safetensors || fail "the weights of the checkpoint differ from the run's"

echo "== 4. the saved Hugging Face folder"
[[ -s out/config.json && -s out/model.safetensors ]] || fail "--save-hf wrote no folder"
"$program" --hf out --tokenizer tok --sample 24 --prompt "And God said" --greedy >sample_saved.txt
cat sample_saved.txt
cmp sample_trained.txt sample_saved.txt || fail "the saved folder gives another greedy sample"

echo "== 5. --export-onnx (where the build has ONNX)"
status=0
"$program" "${flags[@]}" --iters 2 --checkpoint "" --csv "" --tokens onnx.tok --export-onnx model.onnx >onnx.log 2>&1 || status=$?
cat onnx.log
if grep -q "this build has no ONNX export" onnx.log; then
  [[ $status != 0 && ! -e model.onnx ]] || fail "a build without ONNX did not refuse --export-onnx"
else
  [[ $status == 0 && -s model.onnx && -s model.onnx.sample.json ]] || fail "--export-onnx wrote no model"
  if [[ -n ${XGRAD_ONNX_TOOLS:-} ]]; then
    /usr/bin/python3 "$XGRAD_ONNX_TOOLS/check_onnx_models.py" model.onnx
    if [[ -f ${XGRAD_ONNXRUNTIME:-}/package.json ]]; then
      node "$XGRAD_ONNX_TOOLS/check_onnx_runtime.cjs" "$XGRAD_ONNXRUNTIME" model.onnx.sample.json
    fi
  fi
fi

echo "== 6. refused"
ls -l --time-style=+%s full.ckpt full.csv >before.txt
refused() {  # expected message, then the command (under a timeout: a hang fails, it does not block)
  local expected=$1 status=0
  shift
  timeout 60 "$@" >bad.log 2>&1 </dev/null || status=$?
  cat bad.log
  [[ $status != 0 ]] || fail "exit status 0: $*"
  [[ $status != 124 ]] || fail "hung (killed after 60 s): $*"
  grep -qF -- "$expected" bad.log || fail "not refused with '$expected': $*"
  [[ $(grep -vc "^Run with --help" bad.log) == 1 ]] || fail "not one line of error: $*"
}
refused "--hf missing: no config.json there" "$program" --hf missing --text text.txt "${common[@]}"
refused "cannot read --text missing.txt" "$program" --hf "$fixture" --text missing.txt "${common[@]}"
refused "--hf $fixture: no GPT-2 tokenizer" "$program" --hf "$fixture" --sample 4
head -c 300 text.txt >short.txt
refused "--text short.txt is too short" "$program" --hf "$fixture" --text short.txt --tokenizer tok --tokens short.tok
[[ ! -e short.tok ]] || fail "a run refused after tokenizing left its token file short.tok behind"
refused "--block-size 256 is beyond the model's n_positions 128" "$program" "${flags[@]}" --block-size 256
refused "--lr: expected a positive number, got 'abc'" "$program" "${flags[@]}" --lr abc
refused "--top-p: expected a number in (0, 1], got '2'" "$program" "${flags[@]}" --top-p 2
refused "--save-hf full.csv/x: full.csv is not a folder" "$program" "${flags[@]}" --save-hf full.csv/x
refused "--checkpoint nodir/a.ckpt: the folder nodir does not exist" "$program" "${flags[@]}" --checkpoint nodir/a.ckpt
refused "--csv nodir/a.csv: the folder nodir does not exist" "$program" "${flags[@]}" --csv nodir/a.csv
refused "--save-weights nodir/w: the folder nodir does not exist" "$program" "${flags[@]}" --save-weights nodir/w
"$program" --help >help.txt; grep -q "step,loss,val_loss,lr,elapsed" help.txt || fail "--help does not name the CSV's columns"
refused "--export-onnx out: is a folder" "$program" "${flags[@]}" --export-onnx out
refused "--save-hf full.csv: is a file, expected a folder" "$program" "${flags[@]}" --save-hf full.csv
refused "--text text.txt and --tokens ./text.txt name the same file" "$program" "${flags[@]}" --tokens ./text.txt
refused "--tokenizer $fixture: no GPT-2 tokenizer" "$program" "${flags[@]}" --tokenizer "$fixture"
refused "cannot read --hf $fixture/model.safetensors: is a file, expected a folder" "$program" "${flags[@]}" --hf "$fixture/model.safetensors"
mkdir -p bert && sed 's/"model_type": *"gpt2"/"model_type": "bert"/' out/config.json >bert/config.json
refused "bert/config.json" "$program" "${flags[@]}" --hf bert
refused "expected --text FILE to fine-tune on" "$program" --hf out --tokenizer tok --save-hf out2

echo "== 7. special files, paths naming one file, flags named"
# Each refused at once (FIFOs block an open for ever, /dev/zero and /dev/urandom never end), before
# anything is written: no token file, no temporary file, no change to the files named.
mkfifo fifo
cp -r "$fixture" hf  # a copy: the checks below must not risk the fixture's weights
ls -l --time-style=+%s.%N hf text.txt full.ckpt full.csv full.ckpt.tok >before7.txt
refused "--profile: expected a regular file, got 'fifo'" "$program" "${flags[@]}" --profile fifo --tokens p.tok
refused "cannot read --text fifo: it is a FIFO" "$program" --hf "$fixture" --text fifo "${common[@]}" --tokens f.tok
refused "cannot read --text fifo: it is a FIFO" "$program" --text fifo --tokenizer tok2 --train-tokenizer 384
refused "cannot read --text /dev/urandom: it is a character device" "$program" --hf "$fixture" --text /dev/urandom \
  "${common[@]}" --tokens u.tok
refused "cannot read --text /dev/zero: it is a character device" "$program" --text /dev/zero --tokenizer tok2 \
  --train-tokenizer 384
[[ ! -e tok2 && ! -e p.tok && ! -e f.tok && ! -e u.tok && ! -e finetune_gpt2.ckpt.tok ]] ||
  fail "a refused run wrote a token file or a tokenizer"
refused "--profile nodir/trace.json: the folder nodir does not exist" "$program" "${flags[@]}" \
  --profile nodir/trace.json --tokens p.tok
if [[ $(id -u) != 0 ]]; then  # root writes into any folder
  mkdir -p locked && chmod a-w locked
  refused "--profile locked/trace.json: the folder locked is not writable" "$program" "${flags[@]}" \
    --profile locked/trace.json --tokens p.tok
fi
refused "--csv same.bin and --tokens same.bin name the same file" "$program" "${flags[@]}" --tokens same.bin \
  --csv same.bin
refused "--hf hf (its model.safetensors) and --tokens hf/model.safetensors name the same file" \
  "$program" "${flags[@]}" --hf hf --tokens hf/model.safetensors
refused "--checkpoint hf/model.safetensors and --hf hf (its model.safetensors) name the same file" \
  "$program" "${flags[@]}" --hf hf --checkpoint hf/model.safetensors --tokens p.tok
refused "--csv hf/config.json and --hf hf (its config.json) name the same file" \
  "$program" "${flags[@]}" --hf hf --csv hf/config.json --tokens p.tok
ln -sf hf/model.safetensors weights-link
refused "--save-weights weights-link and --hf hf (its model.safetensors) name the same file" \
  "$program" "${flags[@]}" --hf hf --save-weights weights-link --tokens p.tok
refused "--hf hf (its config.json) and --save-hf hf (its config.json) name the same file" \
  "$program" "${flags[@]}" --hf hf --save-hf hf --tokens p.tok
refused "--csv text.txt and --text text.txt name the same file" "$program" "${flags[@]}" --csv text.txt
refused "--resume full.ckpt and --plot full.ckpt name the same file" "$program" --resume full.ckpt \
  --checkpoint full.ckpt --csv full.csv --plot full.ckpt
refused "--checkpoint half.ckpt and --csv half.ckpt name the same file" "$program" --resume full.ckpt \
  --checkpoint half.ckpt --csv half.ckpt
refused "--iters 2 is below the checkpoint's step 40" "$program" --resume full.ckpt --checkpoint r.ckpt --csv r.csv \
  --iters 2
ls -l --time-style=+%s.%N hf text.txt full.ckpt full.csv full.ckpt.tok | diff before7.txt - ||
  fail "a refused run wrote over a file"
cmp hf/model.safetensors "$fixture/model.safetensors" || fail "a refused run wrote over --hf's weights"
[[ -z $(find . -name '.*.tmp-*' -o -name '*.xgrad-save-*') ]] || fail "a refused run left a temporary file"
[[ ! -e p.tok && ! -e same.bin && ! -e r.ckpt && ! -e r.csv ]] || fail "a refused run wrote a file"

ls -l --time-style=+%s full.ckpt full.csv | diff before.txt - || fail "a refused run wrote over a file"
[[ ! -e finetune_gpt2.ckpt && ! -e finetune_gpt2.csv && ! -e out2 ]] || fail "a refused run wrote the default checkpoint or CSV"
cmp <(head -c 300 text.txt) short.txt || fail "a refused run wrote over the text"
echo "PASS"
