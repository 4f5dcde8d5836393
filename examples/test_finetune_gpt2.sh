#!/usr/bin/env bash
# ctest's check of finetune_gpt2 on the tiny Hugging Face GPT-2 fixture (tests/fixtures/hf-gpt2-tiny:
# 2 layers, n_embd 64, vocab 384, random weights written by transformers). The fixture has no
# tokenizer files, so the program trains a byte-level BPE tokenizer of 384 ids (its ids fit the
# model's vocabulary) on the text the script writes: Genesis 1:1-2:7 (King James Version, public
# domain), about 4.7 KB.
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
rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
cat >text.txt <<'TEXT'


In the beginning God created the heaven and the earth.
And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters.
And God said, Let there be light: and there was light.
And God saw the light, that it was good: and God divided the light from the darkness.
And God called the light Day, and the darkness he called Night. And the evening and the morning were the first day.
And God said, Let there be a firmament in the midst of the waters, and let it divide the waters from the waters.
And God made the firmament, and divided the waters which were under the firmament from the waters which were above the firmament: and it was so.
And God called the firmament Heaven. And the evening and the morning were the second day.
And God said, Let the waters under the heaven be gathered together unto one place, and let the dry land appear: and it was so.
And God called the dry land Earth; and the gathering together of the waters called he Seas: and God saw that it was good.
And God said, Let the earth bring forth grass, the herb yielding seed, and the fruit tree yielding fruit after his kind, whose seed is in itself, upon the earth: and it was so.
And the earth brought forth grass, and herb yielding seed after his kind, and the tree yielding fruit, whose seed was in itself, after his kind: and God saw that it was good.
And the evening and the morning were the third day.
And God said, Let there be lights in the firmament of the heaven to divide the day from the night; and let them be for signs, and for seasons, and for days, and years:
And let them be for lights in the firmament of the heaven to give light upon the earth: and it was so.
And God made two great lights; the greater light to rule the day, and the lesser light to rule the night: he made the stars also.
And God set them in the firmament of the heaven to give light upon the earth,
And to rule over the day and over the night, and to divide the light from the darkness: and God saw that it was good.
And the evening and the morning were the fourth day.
And God said, Let the waters bring forth abundantly the moving creature that hath life, and fowl that may fly above the earth in the open firmament of heaven.
And God created great whales, and every living creature that moveth, which the waters brought forth abundantly, after their kind, and every winged fowl after his kind: and God saw that it was good.
And God blessed them, saying, Be fruitful, and multiply, and fill the waters in the seas, and let fowl multiply in the earth.
And the evening and the morning were the fifth day.
And God said, Let the earth bring forth the living creature after his kind, cattle, and creeping thing, and beast of the earth after his kind: and it was so.
And God made the beast of the earth after his kind, and cattle after their kind, and every thing that creepeth upon the earth after his kind: and God saw that it was good.
And God said, Let us make man in our image, after our likeness: and let them have dominion over the fish of the sea, and over the fowl of the air, and over the cattle, and over all the earth, and over every creeping thing that creepeth upon the earth.
So God created man in his own image, in the image of God created he him; male and female created he them.
And God blessed them, and God said unto them, Be fruitful, and multiply, and replenish the earth, and subdue it: and have dominion over the fish of the sea, and over the fowl of the air, and over every living thing that moveth upon the earth.
And God said, Behold, I have given you every herb bearing seed, which is upon the face of all the earth, and every tree, in the which is the fruit of a tree yielding seed; to you it shall be for meat.
And to every beast of the earth, and to every fowl of the air, and to every thing that creepeth upon the earth, wherein there is life, I have given every green herb for meat: and it was so.
And God saw every thing that he had made, and, behold, it was very good. And the evening and the morning were the sixth day.


Thus the heavens and the earth were finished, and all the host of them.
And on the seventh day God ended his work which he had made; and he rested on the seventh day from all his work which he had made.
And God blessed the seventh day, and sanctified it: because that in it he had rested from all his work which God created and made.
These are the generations of the heavens and of the earth when they were created, in the day that the LORD God made the earth and the heavens,
And every plant of the field before it was in the earth, and every herb of the field before it grew: for the LORD God had not caused it to rain upon the earth, and there was not a man to till the ground.
But there went up a mist from the earth, and watered the whole face of the ground.
And the LORD God formed man of the dust of the ground, and breathed into his nostrils the breath of life; and man became a living soul.
TEXT

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
