#!/usr/bin/env bash
# ctest's check of finetune_llm on the tiny Hugging Face Llama fixture (tests/fixtures/hf-llama-tiny:
# 2 layers, hidden 64, 4 heads over 2 KV heads, vocab 320, random weights) with a tokenizer.json of
# exactly 320 ids (tests/fixtures/tokenizers/spm-llama2-320: Llama 2's SentencePiece-style BPE with
# byte fallback, cut to 320 ids; the fixture has no tokenizer) on Genesis 1:1-2:7
# (tests/fixtures/genesis.txt, King James Version, public domain, as test_finetune_gpt2.sh):
#   1. 40 steps of fine-tuning: the loss in the CSV is finite and falls; a sample is printed;
#   2. a run stopped at step 20 and resumed ends with the same weights bit for bit and the same CSV;
#      the finished run resumed trains nothing and rewrites neither its checkpoint nor its CSV;
#   3. --save-hf writes a folder that loads (--hf OUT, its tokenizer.json found there) and gives the
#      same --greedy sample as the model right after training;
#   4. --random-init trains from weights of its own, not the folder's;
#   5. bad input is refused with one line and a non-zero exit, before any training or writing:
#      no --hf, a GPT-2 folder (naming model_type), a tokenizer with more ids than the model's
#      vocab_size, a folder without tokenizer.json, lengths past the context, a short text;
#   6. LoRA (--lora 4 on q_proj, v_proj): only the adapter trains (the loss falls), its checkpoint
#      holds the adapter and its optimizer state (not the frozen model), a run stopped and resumed
#      ends bit for bit as the whole run, --adapter gives the trained model's greedy sample,
#      --merge-and-save writes a plain folder that samples, a PEFT option xgrad lacks is refused.
#
#   test_finetune_llm.sh PROGRAM WORKDIR FIXTURES (tests/fixtures)
set -euo pipefail
program=$1
work=$2
fixtures=$(cd "$3" && pwd)
hf=$fixtures/hf-llama-tiny
tok=$fixtures/tokenizers/spm-llama2-320/tokenizer.json
rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
cp "$fixtures/genesis.txt" text.txt

common=(--tokenizer "$tok" --block-size 32 --batch-size 4 --iters 40 --warmup 5 --lr 0.003
        --eval-interval 10 --eval-iters 2 --checkpoint-interval 0 --plot '')
flags=(--hf "$hf" --text text.txt "${common[@]}")
echo "== 1. fine-tuning"
"$program" "${flags[@]}" --checkpoint full.ckpt --csv full.csv --save-weights full.safetensors --save-hf out \
  --sample 24 --prompt "and god said" --greedy | tee full.log
grep -q "^model: $hf (llama), 2 layers, hidden 64, vocab 320, [0-9]* parameters$" full.log || fail "no model line"
grep -q "| tokenizer: 320 ids$" full.log || fail "the tokenizer is not the 320 ids of $tok"
grep -q "^step,loss,val_loss,lr,elapsed$" full.csv || fail "the CSV has no val_loss column"
[[ $(tail -n 1 full.csv | cut -d, -f1) == 40 ]] || fail "the CSV does not end at step 40"
first=$(sed -n 2p full.csv | cut -d, -f2)
last=$(tail -n 1 full.csv | cut -d, -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a == a + 0 && b == b + 0 && b < a - 0.5) }' ||
  fail "the training loss went from $first to $last"
echo "training loss fell from $first to $last"
[[ -s full.ckpt.tok ]] || fail "the text was not tokenized beside the checkpoint (full.ckpt.tok)"
sed -n '/^-- sample --$/,/^wall time:/p' full.log | sed '1d;$d' >sample_trained.txt
[[ $(head -c 12 sample_trained.txt) == "and god said" ]] || fail "no sample starting with the prompt"

echo "== 2. stopped at step 20, then resumed"
"$program" "${flags[@]}" --checkpoint half.ckpt --csv half.csv --stop-at 20 >/dev/null
"$program" --resume half.ckpt --checkpoint half.ckpt --csv half.csv --save-weights half.safetensors >/dev/null
cmp full.safetensors half.safetensors || fail "the resumed run's weights differ"
diff <(cut -d, -f1-4 full.csv) <(cut -d, -f1-4 half.csv) || fail "the resumed run's CSV differs"
ls -l --time-style=+%s.%N full.ckpt full.csv >before_only.txt
"$program" --resume full.ckpt --checkpoint full.ckpt --csv full.csv --save-weights only.safetensors | tee only.log
grep -q "0 steps in this run" only.log || fail "resuming the finished run trained"
ls -l --time-style=+%s.%N full.ckpt full.csv | diff before_only.txt - || fail "resuming the finished run rewrote a file"
cmp full.safetensors only.safetensors || fail "the weights of the checkpoint differ from the run's"

echo "== 3. the saved Hugging Face folder"
[[ -s out/config.json && -s out/generation_config.json && -s out/model.safetensors ]] || fail "--save-hf wrote no folder"
cp "$tok" out/tokenizer.json  # found there without --tokenizer
"$program" --hf out --sample 24 --prompt "and god said" --greedy >sample_saved.txt
cat sample_saved.txt
cmp sample_trained.txt sample_saved.txt || fail "the saved folder gives another greedy sample"

echo "== 4. --random-init"
"$program" "${flags[@]}" --iters 2 --checkpoint "" --csv "" --tokens r.tok --random-init \
  --save-weights random.safetensors | tee random.log
grep -q "parameters (random weights)$" random.log || fail "--random-init does not say so"
"$program" "${flags[@]}" --iters 2 --checkpoint "" --csv "" --tokens r.tok --save-weights loaded.safetensors >/dev/null
! cmp -s random.safetensors loaded.safetensors || fail "--random-init trained the folder's weights"

echo "== 5. refused"
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
refused "--hf: expected a Hugging Face Llama-family folder" "$program" --text text.txt "${common[@]}" --tokens x.tok
refused "--hf missing: no config.json there" "$program" --hf missing --text text.txt "${common[@]}" --tokens x.tok
refused "model_type: \"gpt2\": xgrad reads \"llama\"" "$program" --hf "$fixtures/hf-gpt2-tiny" --text text.txt "${common[@]}" \
  --tokens x.tok
big=$fixtures/tokenizers/spm-llama2/tokenizer.json
refused "--tokenizer $big: the tokenizer has 756 ids, beyond the model's vocab_size 320" \
  "$program" "${flags[@]}" --tokenizer "$big" --tokens x.tok
refused "--hf $hf/tokenizer.json: no such file" "$program" --hf "$hf" --sample 4
refused "--tokenizer text.txt: " "$program" --hf "$hf" --tokenizer text.txt --sample 4
refused "--block-size 256 is beyond the model's context of 128 tokens" "$program" "${flags[@]}" --block-size 256
refused "--sample 127 after the prompt's 2 tokens goes beyond the model's context of 128 tokens" \
  "$program" --hf out --sample 127 --prompt "the"
head -c 300 text.txt >short.txt
refused "--text short.txt is too short" "$program" --hf "$hf" --text short.txt --tokenizer "$tok" --tokens short.tok
[[ ! -e short.tok ]] || fail "a run refused after tokenizing left its token file short.tok behind"
refused "expected --text FILE to fine-tune on" "$program" --hf out --save-hf out2
refused "--save-hf full.csv: is a file, expected a folder" "$program" "${flags[@]}" --save-hf full.csv
refused "--hf $hf (its model.safetensors) and --tokens $hf/model.safetensors name the same file" \
  "$program" "${flags[@]}" --tokens "$hf/model.safetensors"
ls -l --time-style=+%s full.ckpt full.csv | diff before.txt - || fail "a refused run wrote over a file"
[[ ! -e x.tok && ! -e finetune_llm.ckpt && ! -e finetune_llm.csv && ! -e out2 ]] || fail "a refused run wrote a file"
echo "== 6. LoRA"
lflags=("${flags[@]}" --lora 4 --lora-alpha 8 --lora-targets q_proj,v_proj)
"$program" "${lflags[@]}" --checkpoint lora.ckpt --csv lora.csv --save-weights lora.safetensors \
  --save-adapter adapter --merge-and-save merged --sample 24 --prompt "and god said" --greedy | tee lora.log
grep -q "^LoRA r 4, alpha 8 on 4 modules: 1792 trainable parameters, " lora.log || fail "no LoRA line"
first=$(sed -n 2p lora.csv | cut -d, -f2)
last=$(tail -n 1 lora.csv | cut -d, -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.1) }' || fail "the LoRA loss went from $first to $last"
"$program" "${lflags[@]}" --checkpoint lhalf.ckpt --csv lhalf.csv --stop-at 20 >/dev/null
"$program" --resume lhalf.ckpt --checkpoint lhalf.ckpt --csv lhalf.csv --save-weights lhalf.safetensors >/dev/null
cmp lora.safetensors lhalf.safetensors || fail "the resumed LoRA run's weights differ"
(($(stat -c %s lora.ckpt) * 10 < $(stat -c %s full.ckpt))) || fail "the LoRA checkpoint holds more than the adapter"
sed -n '/^-- sample --$/,/^wall time:/p' lora.log | sed '1d;$d' >sample_lora.txt
"$program" --hf "$hf" --tokenizer "$tok" --adapter adapter --sample 24 --prompt "and god said" --greedy |
  tail -n +2 >sample_adapter.txt
cmp sample_lora.txt sample_adapter.txt || fail "--adapter gives another greedy sample than the trained model"
cp "$tok" merged/tokenizer.json
"$program" --hf merged --sample 24 --prompt "and god said" --greedy >sample_merged.txt
[[ $(head -c 12 sample_merged.txt) == "and god said" ]] || fail "the merged folder does not sample"
mkdir -p dora && cp adapter/adapter_model.safetensors dora/
sed 's/"use_dora": false/"use_dora": true/' adapter/adapter_config.json >dora/adapter_config.json
refused "use_dora: expected false, null or empty" "$program" --hf "$hf" --tokenizer "$tok" --adapter dora --sample 4
refused "--save-adapter and --merge-and-save need --lora R or --adapter DIR" "$program" "${flags[@]}" --save-adapter a2
echo "PASS"
