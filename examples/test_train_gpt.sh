#!/usr/bin/env bash
# ctest's check of train_gpt on a small setting: a tiny GPT (1 layer, n_embd 16, context 16) on a
# text the test writes (120 lines), a few dozen steps:
#   1. the training loss falls along the CSV, which has the held-out loss column (val_loss), and
#      three samples are printed at the end;
#   2. a run stopped with --stop-at, then resumed from its checkpoint (the DataLoader's position
#      included), ends with the same weights bit for bit and the same CSV rows;
#   3. --resume with a larger --iters extends the run;
#   4. --sample prints the prompt and --tokens characters, the same for the same --seed, with the
#      cache's sliding window past the context; --greedy;
#   5. bad input is refused with one clear line and a non-zero exit, writing nothing: a missing or
#      empty text, a text with no held-out line, a prompt character outside the vocabulary,
#      --top-p outside (0, 1], --top-k 0, --temperature 0, a checkpoint of another program, --tokens
#      beyond the context with --window 0; every path flag given a FIFO or /dev/zero (which used to
#      block forever or read until memory ran out), under a timeout; text that is not strict UTF-8
#      (Latin-1, overlong, surrogate, beyond U+10FFFF), named with its byte offset; --seed -1 and
#      2^64; --resume after the text changed;
#   6. when XGRAD_ONNX_TOOLS (tests/onnx) and XGRAD_ONNXRUNTIME (onnxruntime-node's folder) are set:
#      run 1's --export-onnx model passes onnx's checker, ONNX Runtime gives the program's logits on
#      its sample (two batch sizes and lengths), and examples/onnx/gpt_sample.mjs prints the same
#      greedy text as --sample --greedy (past the context), and a seeded temperature sample;
#  5c. --tokenizer bpe: a BPE tokenizer trained on the training lines, saved beside the checkpoint
#      (CHECKPOINT.tokenizer.json) and read back by --resume (bit for bit) and --sample; held-out
#      bits per character reported; a bad --vocab-size or --tokenizer refused;
#  5d. --tokenizer FILE: a Hugging Face tokenizer.json (tests/fixtures/tokenizers, Llama 3's schema)
#      read as it is, copied beside the checkpoint, used by --resume (bit for bit) and --sample; a
#      file of another model type, a missing one and --vocab-size with a file refused;
#   7. when the `bible` program is installed, a few steps on the King James Bible.
#
# Dropout is on (0.1), so that resuming must also restore the generator.
#
#   test_train_gpt.sh PROGRAM WORKDIR [TOY_ENCODER]
# TOY_ENCODER: train_toy_encoder, whose checkpoint --sample must refuse as another program's.
set -euo pipefail
fixtures=$(cd "$(dirname "$0")/../tests/fixtures/tokenizers" && pwd)
program=$1
work=$2
toy=${3:-}
flags=(--n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 8 --iters 60 --warmup 5 --lr 0.01
       --min-lr 0.001 --eval-interval 20 --eval-iters 4 --dropout 0.1 --plot "" --checkpoint-interval 0)

rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
for i in $(seq 1 40); do
  echo "In the beginning was the word, and the word was with God, verse $i."
  echo "And the earth was without form; and darkness was upon the deep."
  echo "Blessed are the meek: for they shall inherit the earth."
done >text.txt
flags+=(--text text.txt)

echo "== 1. uninterrupted run"
onnx_flags=()
[[ -n ${XGRAD_ONNX_TOOLS:-} ]] && onnx_flags=(--export-onnx gpt.onnx)
"$program" "${flags[@]}" --checkpoint full.ckpt --csv full.csv --save-weights full.safetensors "${onnx_flags[@]}" |
  tee full.log
grep -q "^step,loss,val_loss,lr,elapsed$" full.csv || fail "the CSV has no val_loss column"
[[ $(tail -n 1 full.csv | cut -d, -f1) == 60 ]] || fail "the CSV does not end at step 60"
first=$(sed -n 2p full.csv | cut -d, -f3)
last=$(tail -n 1 full.csv | cut -d, -f3)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.3) }' || fail "the held-out loss went from $first to $last"
echo "held-out loss fell from $first to $last"
grep -Eq "^held-out loss: [0-9.]+ nats per character, [0-9.]+ bits per character" full.log ||
  fail "no final held-out loss"
[[ $(grep -c "^-- sample [123] (temperature 0.8) --$" full.log) == 3 ]] || fail "three samples were not printed"

echo "== 2. stopped at step 30, then resumed"
"$program" "${flags[@]}" --checkpoint half.ckpt --csv half.csv --stop-at 30 >/dev/null
"$program" --resume half.ckpt --checkpoint half.ckpt --csv half.csv --save-weights half.safetensors --plot "" \
  >/dev/null
cmp full.safetensors half.safetensors || fail "the resumed run's weights differ"
diff <(cut -d, -f1-4 full.csv) <(cut -d, -f1-4 half.csv) || fail "the resumed run's CSV differs"

echo "== 3. extended to 80 steps"
cp full.ckpt long.ckpt
"$program" --resume long.ckpt --iters 80 --checkpoint long.ckpt --csv long.csv --plot "" | tee long.log
grep -q "at step 60 of 80" long.log || fail "the run was not extended"

echo "== 4. --sample"
"$program" --checkpoint full.ckpt --sample "In the" --tokens 40 --seed 3 --top-k 5 --top-p 0.9 >s1.txt
"$program" --checkpoint full.ckpt --sample "In the" --tokens 40 --seed 3 --top-k 5 --top-p 0.9 >s2.txt
cmp s1.txt s2.txt || fail "the same --seed sampled different text"
cat s1.txt
[[ $(head -c 6 s1.txt) == "In the" ]] || fail "the sample does not start with the prompt"
[[ $(tr -d '\n' <s1.txt | wc -m) -ge 40 ]] || fail "the sample is shorter than the prompt and --tokens 40"
"$program" --checkpoint full.ckpt --sample "And" --tokens 10 --greedy | tee g.txt
[[ $(head -c 3 g.txt) == "And" ]] || fail "--greedy printed no continuation"

echo "== 5. refused"
ls -l --time-style=+%s full.ckpt full.csv >before.txt
refused() {  # expected message, then the command
  local expected=$1 status=0
  shift
  "$@" >bad.log 2>&1 || status=$?
  cat bad.log
  [[ $status != 0 ]] || fail "exit status 0: $*"
  grep -q -- "$expected" bad.log || fail "not refused with '$expected': $*"
  # One line (CLI11 adds "Run with --help for more information." to a bad flag's).
  [[ $(grep -vc "^Run with --help" bad.log) == 1 ]] || fail "not one line of error: $*"
}
refused "cannot read --text missing.txt: expected a readable UTF-8 or ASCII text file" "$program" --text missing.txt
: >empty.txt
refused "--text empty.txt is empty: expected UTF-8 or ASCII text" "$program" --text empty.txt
printf 'one line\ntwo lines\n' >short.txt
refused "short.txt has no held-out line" "$program" --text short.txt
refused "the prompt's character '#' (U+0023) is not in the model's vocabulary" \
  "$program" --checkpoint full.ckpt --sample "In #"
refused "--top-p: expected a number in (0, 1], got '1.5'" "$program" --checkpoint full.ckpt --sample "In" --top-p 1.5
refused "--top-p: expected a number in (0, 1], got '0'" "$program" --checkpoint full.ckpt --sample "In" --top-p 0
refused "--top-k: expected an integer in \[1, " "$program" --checkpoint full.ckpt --sample "In" --top-k 0
refused "--temperature: expected a number > 0 (for argmax decoding pass --greedy), got '0'" \
  "$program" --checkpoint full.ckpt --sample "In" --temperature 0
refused "--tokens 20 after a prompt of 2 characters goes beyond the model's context of 16 characters with --window 0" \
  "$program" --checkpoint full.ckpt --sample "In" --tokens 20 --window 0
refused "--sample: no checkpoint none.ckpt: train first, or pass --checkpoint FILE" \
  "$program" --checkpoint none.ckpt --sample "In"
refused "--export-onnx exports after training, not with --sample" \
  "$program" --checkpoint full.ckpt --sample "In" --export-onnx bad.onnx
if [[ -n ${XGRAD_ONNX_TOOLS:-} ]]; then  # a build without ONNX refuses --export-onnx itself
  refused "--export-onnx needs --block-size 4 or more" "$program" --text text.txt --block-size 3 --export-onnx bad.onnx
fi
[[ ! -e bad.onnx ]] || fail "a refused export wrote its file"
if [[ -n $toy ]]; then
  "$toy" --steps 2 --eval-interval 1 --eval-size 10 --d-model 8 --checkpoint toy.ckpt --csv "" --plot "" >/dev/null
  refused "is not a checkpoint of train_gpt" "$program" --checkpoint toy.ckpt --sample "In"
fi

echo "== 5b. path flags that are not regular files, strict UTF-8, seeds, a changed text"
mkfifo fifo
for flag in --text --init-weights --resume --checkpoint --csv --save-weights --plot --export-onnx --profile; do
  refused "^$flag: expected a regular file, got 'fifo', a FIFO (named pipe)$" timeout 60 "$program" "$flag" fifo
  refused "^$flag: expected a regular file, got '/dev/zero', a character device$" \
    timeout 60 "$program" "$flag" /dev/zero
done
refused "^--text: expected a regular file, got '/dev/urandom', a character device$" \
  timeout 60 "$program" --text /dev/urandom
refused "^--checkpoint: expected a regular file, got 'fifo', a FIFO (named pipe)$" \
  timeout 60 "$program" --checkpoint fifo --sample "In"
# Two paths naming one file (docs/reliability.md, "Output rule"), files derived from a flag included.
refused "^--checkpoint same.out and --csv same.out name the same file: two outputs would overwrite each other" \
  timeout 60 "$program" --text text.txt --checkpoint same.out --csv same.out
refused "^--csv text.txt and --text text.txt name the same file: an output would overwrite an input" \
  timeout 60 "$program" --text text.txt --csv text.txt
refused "^--csv run.ckpt.train.tok and the training token file of --checkpoint run.ckpt.train.tok name the same file" \
  timeout 60 "$program" --text text.txt --checkpoint run.ckpt --csv run.ckpt.train.tok
refused "^--profile nodir/trace.json: the folder nodir does not exist$" \
  timeout 60 "$program" --text text.txt --profile nodir/trace.json
[[ ! -e same.out && ! -e run.ckpt && ! -e run.ckpt.train.tok ]] || fail "a refused run wrote a file"
{ cat text.txt; printf 'caf\xe9 au lait\n'; } >latin1.txt
refused "^--text latin1.txt is not UTF-8: at byte offset $(($(wc -c <text.txt) + 3)) (line 121), the byte 0xE9 starts a 3-byte character but is followed by 0x20; a Latin-1 (ISO-8859-1) file converts with: iconv -f latin1 -t utf-8 latin1.txt > latin1.txt.utf8$" \
  "$program" --text latin1.txt
printf 'ab\xc0\xaf\n' >overlong.txt
refused "^--text overlong.txt is not UTF-8: at byte offset 2 (line 1), an overlong encoding of U+002F (0xC0 0xAF);" \
  "$program" --text overlong.txt
printf 'a\nb\xed\xa0\x80\n' >surrogate.txt
refused "at byte offset 3 (line 2), the surrogate U+D800 (0xED 0xA0 0x80), which is not a character;" \
  "$program" --text surrogate.txt
printf '\xf4\x90\x80\x80\n' >beyond.txt
refused "at byte offset 0 (line 1), U+110000 (0xF4 0x90 0x80 0x80), beyond the last code point U+10FFFF;" \
  "$program" --text beyond.txt
short=(--n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 8 --eval-interval 2 --eval-iters 1 --plot ""
       --csv "")
if command -v iconv >/dev/null 2>&1; then  # the conversion the message gives is accepted
  iconv -f latin1 -t utf-8 latin1.txt >latin1.txt.utf8
  "$program" "${short[@]}" --iters 2 --text latin1.txt.utf8 --checkpoint "" >/dev/null || fail "the converted text was refused"
fi
refused "^--seed: expected an integer in \[0, 18446744073709551615\], got '-1'$" "$program" --seed -1
refused "^--seed: expected an integer in \[0, 18446744073709551615\], got '18446744073709551616'$" \
  "$program" --seed 18446744073709551616
cp text.txt changing.txt
"$program" "${short[@]}" --text changing.txt --checkpoint changing.ckpt --iters 4 --stop-at 2 >/dev/null
sed -i '1i Let there be light: and there was light.' changing.txt  # every line's split changes
refused "^cannot resume from changing.ckpt: it was made with another text than the one in changing.txt now (changed since?): expected [0-9]* training windows of 16 characters" \
  "$program" --resume changing.ckpt --checkpoint "" --csv "" --plot ""
cp text.txt changing.txt
sed -i 's/meek/maek/' changing.txt  # the same length and characters, another text
refused "^cannot resume from changing.ckpt: it was made with another text than the one in changing.txt now (changed since?): the same number of training windows" \
  "$program" --resume changing.ckpt --checkpoint "" --csv "" --plot ""

ls -l --time-style=+%s full.ckpt full.csv | diff before.txt - || fail "a refused run wrote over a file"
[[ ! -e gpt.ckpt && ! -e gpt.csv ]] || fail "a refused run wrote the default checkpoint or CSV"

echo "== 5c. --tokenizer bpe"
bpe=(--n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 8 --warmup 5 --lr 0.01 --min-lr 0.001
     --eval-interval 10 --eval-iters 4 --dropout 0.1 --plot "" --checkpoint-interval 0 --text text.txt
     --tokenizer bpe --vocab-size 300 --iters 20)
"$program" "${bpe[@]}" --checkpoint bpe.ckpt --csv bpe.csv --save-weights bpe.safetensors | tee bpe.log
grep -q "^tokenizer: bpe, 300 ids" bpe.log || fail "no BPE tokenizer of 300 ids"
grep -Eq "^held-out loss: [0-9.]+ nats per character, [0-9.]+ bits per character \([0-9.]+ nats per token; [0-9]+ held-out tokens for [0-9]+ characters\)" \
  bpe.log || fail "no held-out bits per character for BPE"
grep -q '"type": "BPE"' bpe.ckpt.tokenizer.json || fail "no BPE tokenizer file beside the checkpoint"
"$program" "${bpe[@]}" --checkpoint bpeh.ckpt --csv bpeh.csv --stop-at 10 >/dev/null
cp bpeh.ckpt.tokenizer.json saved.json
echo '{"model": ' >bpeh.ckpt.tokenizer.json  # the resumed run reads the file beside the checkpoint
refused "^cannot read the tokenizer of bpeh.ckpt: bpeh.ckpt.tokenizer.json: not valid JSON" \
  "$program" --resume bpeh.ckpt --checkpoint "" --csv "" --plot ""
cp saved.json bpeh.ckpt.tokenizer.json
"$program" --resume bpeh.ckpt --checkpoint bpeh.ckpt --csv bpeh.csv --save-weights bpeh.safetensors --plot "" \
  >/dev/null
cmp bpe.safetensors bpeh.safetensors || fail "the resumed BPE run's weights differ"
diff <(cut -d, -f1-4 bpe.csv) <(cut -d, -f1-4 bpeh.csv) || fail "the resumed BPE run's CSV differs"
"$program" --checkpoint bpe.ckpt --sample "In the #" --tokens 12 --seed 3 >b1.txt  # '#': bytes for BPE
[[ $(head -c 8 b1.txt) == "In the #" ]] || fail "the BPE sample does not start with the prompt"
refused "^--tokens 20 after a prompt of [0-9]* tokens goes beyond the model's context of 16 tokens with --window 0" \
  "$program" --checkpoint bpe.ckpt --sample "In the" --tokens 20 --window 0
refused "^--vocab-size: expected an integer in \[257, 65536\], got '256'$" "$program" "${bpe[@]}" --vocab-size 256
refused "^--vocab-size is for --tokenizer bpe" "$program" --text text.txt --tokenizer char --vocab-size 300
refused "^--tokenizer word: expected char, bpe or a tokenizer file: " "$program" --text text.txt --tokenizer word
if [[ -n ${XGRAD_ONNX_TOOLS:-} ]]; then  # a build without ONNX refuses --export-onnx itself
  refused "^--export-onnx writes a character vocabulary" "$program" "${bpe[@]}" --export-onnx bad.onnx
fi
[[ ! -e bad.onnx ]] || fail "a refused export wrote its file"

echo "== 5d. --tokenizer FILE (a Hugging Face tokenizer.json)"
llama3=$fixtures/bytelevel-llama3/tokenizer.json
hf=(--n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 8 --warmup 5 --lr 0.01 --min-lr 0.001
    --eval-interval 10 --eval-iters 4 --dropout 0.1 --plot "" --checkpoint-interval 0 --text text.txt
    --tokenizer "$llama3" --iters 20)
"$program" "${hf[@]}" --checkpoint hf.ckpt --csv hf.csv --save-weights hf.safetensors | tee hf.log
grep -q "^tokenizer: hf, 782 ids" hf.log || fail "the tokenizer file was not read as a tokenizer of 782 ids"
cmp "$llama3" hf.ckpt.tokenizer.json || fail "the tokenizer file beside the checkpoint is not the one given"
"$program" "${hf[@]}" --checkpoint hfh.ckpt --csv hfh.csv --stop-at 10 >/dev/null
"$program" --resume hfh.ckpt --checkpoint hfh.ckpt --csv hfh.csv --save-weights hfh.safetensors --plot "" >/dev/null
cmp hf.safetensors hfh.safetensors || fail "the resumed run with a tokenizer file has other weights"
"$program" --checkpoint hf.ckpt --sample "In the beginning" --tokens 6 --seed 3 >h1.txt
[[ $(head -c 16 h1.txt) == "In the beginning" ]] || fail "the sample through the tokenizer file lacks the prompt"
refused "^--vocab-size is for --tokenizer bpe: the tokenizer file .* has its own vocabulary" \
  "$program" --text text.txt --tokenizer "$llama3" --vocab-size 300
sed 's/"type": "BPE"/"type": "WordPiece"/' "$llama3" >wordpiece.json
refused "^--tokenizer wordpiece.json: expected char, bpe or a tokenizer file: wordpiece.json: model.type is 'WordPiece'" \
  "$program" --text text.txt --tokenizer wordpiece.json

if [[ -n ${XGRAD_ONNX_TOOLS:-} ]]; then
  echo "== 6. the exported model in onnx's checker, ONNX Runtime and gpt_sample.mjs"
  /usr/bin/python3 "$XGRAD_ONNX_TOOLS/check_onnx_models.py" gpt.onnx
  if [[ ! -f ${XGRAD_ONNXRUNTIME:-}/package.json ]]; then
    echo "SKIP (ONNX Runtime part of step 6): onnxruntime-node is not in '${XGRAD_ONNXRUNTIME:-}'" \
         "(ctest's onnx_runtime_install could not install it: npm's registry unreachable?)"
  else
    node "$XGRAD_ONNX_TOOLS/check_onnx_runtime.cjs" "$XGRAD_ONNXRUNTIME" gpt.onnx.sample.json
    mkdir -p js/node_modules
    cp "$(dirname "$0")/onnx/gpt_sample.mjs" js/
    ln -sfn "$XGRAD_ONNXRUNTIME" js/node_modules/onnxruntime-node
    "$program" --checkpoint full.ckpt --sample "And the earth w" --tokens 20 --greedy >greedy_xgrad.txt
    node js/gpt_sample.mjs gpt.onnx "And the earth w" 20 >greedy_onnx.txt
    cat greedy_onnx.txt
    cmp greedy_xgrad.txt greedy_onnx.txt || fail "gpt_sample.mjs's greedy text differs from --sample --greedy's"
    node js/gpt_sample.mjs gpt.onnx "In the" 40 0.8 7 >t1.txt
    node js/gpt_sample.mjs gpt.onnx "In the" 40 0.8 7 >t2.txt
    cat t1.txt
    cmp t1.txt t2.txt || fail "gpt_sample.mjs sampled different text with the same seed"
    [[ $(head -c 6 t1.txt) == "In the" && $(tr -d '\n' <t1.txt | wc -m) -ge 40 ]] ||
      fail "gpt_sample.mjs did not print the prompt and 40 characters"
  fi
fi

if command -v bible >/dev/null 2>&1; then
  echo "== 7. the King James Bible"
  "$program" --n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 8 --iters 10 --eval-interval 10 \
    --eval-iters 2 --plot "" --checkpoint bible.ckpt --csv bible.csv | tee bible.log
  grep -q "31102 verses" bible.log || fail "the Bible's verses were not all read"
fi
echo "PASS"
