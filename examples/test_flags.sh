#!/usr/bin/env bash
# The example programs' flags against hostile input, two ways (ctest runs each):
#
#   pairs    the output rule (docs/reliability.md): for each program and mode, every pair of its
#            output flags, and every output flag with every input flag, set to one existing file
#            is refused at once -- a non-zero exit within the timeout, one message naming both
#            flags -- and the file is left as it was, nothing else written;
#   hostile  every flag that takes a value (read from --help, so a new flag is swept too), given
#            non-numbers, empty text, huge and negative numbers, a FIFO and /dev/zero: no
#            std::bad_alloc, length_error, basic_string, stoi/stol/stod, nlohmann or `terminate
#            called` reaches the user, no death by a signal, and a FIFO or /dev/zero never hangs.
#            A number that is valid but large may start a long run: it is stopped by the timeout,
#            which only a FIFO or /dev/zero count as a failure.
#
#   test_flags.sh pairs|hostile WORKDIR HF_FIXTURE WORDS TRAIN_GPT FINETUNE_GPT2 TRAIN_MASKED_CHARS \
#                 TRAIN_TOY_ENCODER GRADCHECK FINETUNE_LLM LLAMA_FIXTURE LLAMA_TOKENIZER
set -uo pipefail
what=$1 work=$2 hf=$3 words=$4 train_gpt=$5 finetune_gpt2=$6 train_masked_chars=$7 train_toy_encoder=$8
gradcheck=$9 finetune_llm=${10} llama=${11} llama_tokenizer=${12}
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# A text of 200 numbered lines (train_gpt holds 1 in 10 out; finetune_gpt2 needs a few windows),
# and a BPE tokenizer for finetune_gpt2 (the fixture has none).
for i in $(seq 1 200); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7 % 13))"; done >text.txt
"$finetune_gpt2" --text text.txt --tokenizer tok --train-tokenizer 300 >/dev/null || { echo "no tokenizer"; exit 1; }
mkfifo fifo

# Each mode: its name, the program, its base flags (a valid, tiny run; FLAG VALUE pairs, paths
# relative to a folder below this one), its output flags and its input flags, and the INPUT:OUTPUT
# pairs that may name one path (a resumed run rewrites its checkpoint; --save-hf may write its two
# files into the --tokenizer folder, whose files it leaves alone).
declare -A program base outputs inputs lead allowed
modes=(train_gpt train_gpt_sample finetune_gpt2 finetune_gpt2_tokenizer finetune_gpt2_sample finetune_llm
       finetune_llm_sample train_masked_chars train_masked_chars_predict train_toy_encoder)
program[train_gpt]=$train_gpt
base[train_gpt]="--text ../text.txt --iters 1 --n-layer 1 --n-head 1 --n-embd 8 --block-size 8 --batch-size 2
  --eval-interval 1 --eval-iters 1 --warmup 0 --checkpoint-interval 0 --threads 1 --tokens 8 --plot ''"
outputs[train_gpt]="--checkpoint --csv --save-weights --plot --export-onnx --profile"
inputs[train_gpt]="--text --init-weights --resume"
allowed[train_gpt]="--resume:--checkpoint"
program[train_gpt_sample]=$train_gpt
base[train_gpt_sample]="--sample a --checkpoint ../gpt.ckpt --tokens 8"
outputs[train_gpt_sample]="--profile"
inputs[train_gpt_sample]="--checkpoint"
program[finetune_gpt2]=$finetune_gpt2
base[finetune_gpt2]="--hf $hf --text ../text.txt --tokenizer ../tok --iters 1 --block-size 8 --batch-size 2
  --eval-interval 1 --eval-iters 1 --warmup 0 --threads 1 --plot ''"
outputs[finetune_gpt2]="--checkpoint --csv --save-weights --plot --export-onnx --profile --tokens --save-hf"
inputs[finetune_gpt2]="--text --resume --hf --tokenizer"
allowed[finetune_gpt2]="--resume:--checkpoint --tokenizer:--save-hf"
program[finetune_gpt2_tokenizer]=$finetune_gpt2
base[finetune_gpt2_tokenizer]="--text ../text.txt --tokenizer tk --train-tokenizer 300"
outputs[finetune_gpt2_tokenizer]="--tokenizer --profile"
inputs[finetune_gpt2_tokenizer]="--text"
program[finetune_gpt2_sample]=$finetune_gpt2
base[finetune_gpt2_sample]="--hf $hf --tokenizer ../tok --sample 4"
outputs[finetune_gpt2_sample]="--profile"
inputs[finetune_gpt2_sample]="--hf --tokenizer"
program[finetune_llm]=$finetune_llm
base[finetune_llm]="--hf $llama --text ../text.txt --tokenizer $llama_tokenizer --iters 1 --block-size 8
  --batch-size 2 --eval-interval 1 --eval-iters 1 --warmup 0 --threads 1 --plot ''"
outputs[finetune_llm]="--checkpoint --csv --save-weights --plot --profile --tokens --save-hf"
inputs[finetune_llm]="--text --resume --hf --tokenizer"
allowed[finetune_llm]="--resume:--checkpoint"
program[finetune_llm_sample]=$finetune_llm
base[finetune_llm_sample]="--hf $llama --tokenizer $llama_tokenizer --sample 4"
outputs[finetune_llm_sample]="--profile"
inputs[finetune_llm_sample]="--hf --tokenizer"
program[train_masked_chars]=$train_masked_chars
base[train_masked_chars]="--words $words --steps 1 --d-model 8 --layers 1 --heads 1 --dim-feedforward 8
  --batch-size 4 --eval-interval 1 --warmup 0 --plot ''"
outputs[train_masked_chars]="--checkpoint --csv --save-weights --plot --export-onnx --profile"
inputs[train_masked_chars]="--words --resume"
allowed[train_masked_chars]="--resume:--checkpoint"
program[train_masked_chars_predict]=$train_masked_chars
base[train_masked_chars_predict]="--predict h_llo --checkpoint ../masked.ckpt"
outputs[train_masked_chars_predict]="--profile"
inputs[train_masked_chars_predict]="--checkpoint"
program[train_toy_encoder]=$train_toy_encoder
base[train_toy_encoder]="--steps 1 --d-model 8 --layers 1 --heads 1 --dim-feedforward 8 --batch-size 4
  --eval-size 8 --eval-interval 1 --warmup 0 --plot ''"
outputs[train_toy_encoder]="--checkpoint --csv --save-weights --plot --export-onnx --profile"
inputs[train_toy_encoder]="--resume"
allowed[train_toy_encoder]="--resume:--checkpoint"

# The base flags of `mode` without those named after it, then the rest of the arguments.
# (eval: the base strings hold '' for an empty value.)
command_of() {
  local mode=$1 drop=$2
  shift 2
  local -a flags
  eval "flags=(${base[$mode]})"
  local -a out=("${program[$mode]}" ${lead[$mode]:-})
  local i
  for ((i = 0; i < ${#flags[@]}; i += 2)); do
    [[ " $drop " == *" ${flags[i]} "* ]] || out+=("${flags[i]}" "${flags[i + 1]}")
  done
  printf '%s\0' "${out[@]}" "$@"
}

# Runs `mode` in a fresh folder run/ with the flags after it; sets status and log.
run_mode() {
  local mode=$1 drop=$2 limit=$3
  shift 3
  rm -rf run && mkdir run
  local -a cmd
  mapfile -d '' cmd < <(command_of "$mode" "$drop" "$@")
  status=0
  (cd run && timeout "$limit" "${cmd[@]}" </dev/null >../run.log 2>&1) || status=$?
  log=$(cat run.log)
}

pairs() {
  # Checkpoints for the modes that read one (a one-step run each).
  run_mode train_gpt "--checkpoint" 120 --checkpoint ../gpt.ckpt
  [[ $status == 0 ]] || { echo "$log"; fail "train_gpt made no checkpoint"; }
  run_mode train_masked_chars "--checkpoint" 120 --checkpoint ../masked.ckpt
  [[ $status == 0 ]] || { echo "$log"; fail "train_masked_chars made no checkpoint"; }
  local runs=0 mode a b
  for mode in "${modes[@]}"; do
    local -a outs=(${outputs[$mode]}) ins=(${inputs[$mode]})
    local -a pairs_of=()
    for ((i = 0; i < ${#outs[@]}; ++i)); do
      for ((j = i + 1; j < ${#outs[@]}; ++j)); do pairs_of+=("${outs[i]} ${outs[j]}"); done
      for b in "${ins[@]}"; do
        [[ " ${allowed[$mode]:-} " == *" $b:${outs[i]} "* ]] && continue
        pairs_of+=("$b ${outs[i]}")
      done
    done
    for pair in "${pairs_of[@]}"; do
      read -r a b <<<"$pair"
      rm -rf run && mkdir run && echo "keep" >run/same
      local -a cmd
      mapfile -d '' cmd < <(command_of "$mode" "$a $b" "$a" same "$b" same)
      status=0
      (cd run && timeout 20 "${cmd[@]}" </dev/null >../run.log 2>&1) || status=$?
      log=$(cat run.log)
      runs=$((runs + 1))
      local where="$mode $a same $b same"
      if [[ $status == 0 || $status == 124 ]]; then
        fail "$where: exit status $status, expected a refusal"
      elif ! grep -qF -- "$a " run.log || ! grep -qF -- "$b " run.log || ! grep -qF "name the same file" run.log; then
        fail "$where: the message does not name both flags: $log"
      elif [[ $(cat run/same) != keep ]]; then
        fail "$where: the file was written over"
      elif [[ $(ls -A run) != same ]]; then
        fail "$where: a refused run wrote $(ls -A run | tr '\n' ' ')"
      fi
    done
  done
  echo "$runs pairs of flags naming one file, each refused"
}

# The flags of `mode` that take a value, with their type, from its --help:
# "  --lr FLOAT:POSITIVE ..." -> "--lr FLOAT".
value_flags() {
  "${program[$1]}" --help | sed -n 's/^ *\(-[a-zA-Z], \)\{0,1\}\(--[a-z0-9-]*\) \([A-Z]*\).*/\2 \3/p' | sort -u
}

hostile() {
  # A text flag gets paths that are not regular files and text that is no path; a number flag,
  # what is no number, none, a negative, huge and non-finite numbers, and a large valid one.
  local -a text_values=("" abc ../fifo /dev/zero . nodir/x)
  local -a number_values=("" abc -1 99999999999999999999 1e999 nan 1000000)
  local runs=0 slow=0 mode flag type value
  for mode in train_gpt finetune_gpt2 finetune_llm train_masked_chars train_toy_encoder gradcheck; do
    while read -r flag type; do
      local -a values=("${number_values[@]}")
      [[ $type == TEXT ]] && values=("${text_values[@]}")
      for value in "${values[@]}"; do
        run_mode "$mode" "$flag" 3 "$flag" "$value"
        runs=$((runs + 1))
        local where="$mode $flag '$value'"
        if grep -qE "bad_alloc|length_error|basic_string|\bsto(i|l|ul|ll|ull|f|d)\b|nlohmann|terminate called|what\(\)" \
          run.log; then
          fail "$where: leaked an internal error: $log"
        elif [[ $status == 124 ]]; then
          # Only a FIFO or /dev/zero may not keep a program busy; any other value may be valid
          # (`--plot abc` trains, then draws abc.png: past 3 s on a loaded machine).
          [[ $value == ../fifo || $value == /dev/zero ]] && fail "$where: hung (stopped after 3 s)"
          slow=$((slow + 1))
        elif ((status > 128)); then
          fail "$where: died of signal $((status - 128)): $log"
        fi
      done
    done < <(value_flags "$mode")
  done
  echo "$runs hostile values, none leaked an internal error, crashed or hung ($slow valid values ran past 3 s)"
}

program[gradcheck]=$gradcheck
lead[gradcheck]="add"  # one check (its positional argument), so that a valid value runs in milliseconds
base[gradcheck]="--batch 1"

case $what in
  pairs) pairs ;;
  hostile) hostile ;;
  *) echo "test_flags.sh: expected pairs or hostile, got '$what'" >&2; exit 2 ;;
esac
((failures == 0)) || { echo "$failures failure(s)" >&2; exit 1; }
echo "PASS"
