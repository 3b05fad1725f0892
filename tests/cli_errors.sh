#!/bin/sh
# The CLI on bad input: each case must exit with status 1 or 2 (never a signal, never 0) and print a
# message on stderr; the good cases must exit 0.
q=$1 data=$2 fails=0
expect_error() {
    err=$("$@" 2>&1 >/dev/null); rc=$?
    if [ $rc -ne 1 ] && [ $rc -ne 2 ]; then echo "FAIL (exit $rc): $*"; fails=$((fails+1)); return; fi
    if [ -z "$err" ]; then echo "FAIL (no message): $*"; fails=$((fails+1)); return; fi
    echo "ok ($rc): $* -> $(echo "$err" | head -n1)"
}
expect_error_with() { # NEEDLE CMD...: as expect_error, and the message must hold NEEDLE
    needle=$1; shift
    err=$("$@" 2>&1 >/dev/null); rc=$?
    if [ $rc -ne 1 ] && [ $rc -ne 2 ]; then echo "FAIL (exit $rc): $*"; fails=$((fails+1)); return; fi
    case $err in *"$needle"*) echo "ok ($rc): $* -> $(echo "$err" | head -n1)" ;;
    *) echo "FAIL (message lacks '$needle'): $* -> $err"; fails=$((fails+1)) ;; esac
}
# nan_patch FILE TENSOR: the first value of TENSOR in the safetensors FILE becomes NaN (FILE must be a copy)
nan_patch() {
    python3 - "$1" "$2" <<'EOF'
import json, struct, sys
path, name = sys.argv[1], sys.argv[2]
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    t = json.loads(f.read(n))[name]
    f.seek(8 + n + t["data_offsets"][0])
    f.write({"F32": b"\x00\x00\xc0\x7f", "F16": b"\x00\x7e", "BF16": b"\xc0\x7f"}[t["dtype"]])
EOF
}
expect_json() { # CMD...: must succeed and print valid JSON on stdout
    if "$@" 2>/dev/null | python3 -m json.tool >/dev/null 2>&1; then echo "ok (valid JSON): $*"
    else echo "FAIL (not valid JSON, or failed): $*"; fails=$((fails+1)); fi
}
expect_ok() {
    if ! "$@" >/dev/null 2>&1; then echo "FAIL (should succeed): $*"; fails=$((fails+1)); else echo "ok: $*"; fi
}
# expect_message TEXT CMD...: an error (exit 1 or 2) whose message contains TEXT
expect_message() {
    want=$1; shift
    err=$("$@" 2>&1 >/dev/null); rc=$?
    case $err in *"$want"*) ok=1 ;; *) ok=0 ;; esac
    if { [ $rc -ne 1 ] && [ $rc -ne 2 ]; } || [ $ok -eq 0 ]; then
        echo "FAIL (exit $rc, message without '$want'): $* -> $err"; fails=$((fails+1))
    else echo "ok ($rc): $* -> $(echo "$err" | head -n1)"; fi
}
# CONDITION; check WHAT $?: a named test of the status of the shell condition just run
check() {
    if [ "$2" -eq 0 ]; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails+1)); fi
}
expect_error "$q"
expect_error "$q" frobnicate
expect_error "$q" generate --ids 1,2
expect_error "$q" generate -m /nonexistent --ids 1,2
expect_error "$q" generate -m "$data/tiny-mm" --ids 1,x,2
expect_error "$q" generate -m "$data/tiny-mm" --ids 1,,2
expect_error "$q" generate -m "$data/tiny-mm" --ids 99999999
expect_error "$q" generate -m "$data/tiny-mm" --ids 5000
expect_error "$q" generate -m "$data/tiny-mm" --ids 1 -n -3
expect_error "$q" generate -m "$data/tiny-mm" --ids 1 --bogus
expect_error "$q" generate -m "$data/tiny-mm" --ids 1,2,3 --ctx 2
expect_error "$q" generate -m "$data/tiny-mm" --ids
expect_error "$q" logits -m "$data/tiny-mm" --ids 1,2 --pos 7
expect_error "$q" generate -m "$data/tiny-mm" --ids 1,2 --kv q4
expect_error "$q" generate -m "$data/tiny-flat" --ids 1,2 --spec-k 3
expect_error "$q" generate -m "$data/tiny-mm" --ids 1,2 --spec-k 99
expect_error "$q" inspect /nonexistent
expect_error "$q" inspect
expect_ok "$q" --help
expect_ok "$q" generate --help
expect_ok "$q" logits --help
expect_ok "$q" inspect "$data/tiny-flat"
expect_ok "$q" generate -m "$data/tiny-flat" --ids 1,2,3 -n 4 --json
expect_ok "$q" logits -m "$data/tiny-tied" --ids 1,2,3 --pos 0 --json
# a synthetic checkpoint comes with a tokenizer, so text prompts and the chat template work on it
syn=$(mktemp -d)
expect_ok "$q" synth --preset tiny --format nvfp4 --mtp "$syn/m"
expect_ok "$q" tokenize -m "$syn/m" --json "Hello <|im_end|> wörld"
expect_ok "$q" generate -m "$syn/m" -p "Hello" --chat --no-think -n 4 --no-eos --spec-k 2
expect_error "$q" synth --preset huge --format nvfp4 "$syn/x"
# a tokenizer with an id past config.json's vocab_size (2048) belongs to another model
cp -r "$syn/m" "$syn/big-tok"
sed 's/"id":2047,/"id":2048,/' "$syn/m/tokenizer.json" >"$syn/big-tok/tokenizer.json"
expect_error_with "token id 2048" "$q" generate -m "$syn/big-tok" -p "Hello" -n 2
expect_error_with "vocab_size 2048 of $syn/big-tok/config.json" "$q" generate -m "$syn/big-tok" -p "Hello" -n 2
# NaN weights: generation stops with an error naming the position (greedy, sampled, speculative main and MTP head),
# inspect --check names the tensor, and logits --json stays valid JSON (null for NaN)
nan=$(mktemp -d)
cp -r "$data/tiny-flat" "$nan/flat" && cp -r "$data/tiny-mm" "$nan/mm" && cp -r "$data/tiny-mm" "$nan/mtp"
nan_patch "$nan/flat/model-00002-of-00002.safetensors" model.norm.weight
nan_patch "$nan/mm/model.safetensors" model.language_model.norm.weight
nan_patch "$nan/mtp/model.safetensors" mtp.norm.weight
expect_error_with "non-finite logits at position 2" "$q" generate -m "$nan/flat" --ids 1,2,3 -n 4
expect_error_with "non-finite logits at position 2" "$q" generate -m "$nan/flat" --ids 1,2,3 -n 4 --temperature 0.8
expect_error_with "non-finite logits at position 2" "$q" generate -m "$nan/mm" --ids 1,2,3 -n 4 --spec-k 2
expect_error_with "non-finite logits of the MTP head" "$q" generate -m "$nan/mtp" --ids 1,2,3 -n 4 --spec-k 2
expect_error_with "non-finite logits of the MTP head" "$q" generate -m "$nan/mtp" --ids 1,2,3 -n 4 --spec-k 2 \
    --temperature 0.8
expect_error_with "the first model.norm.weight (F16, 1 non-finite of" "$q" inspect --check "$nan/flat"
expect_error_with "the first mtp.norm.weight (BF16, 1 non-finite of" "$q" inspect --check "$nan/mtp"
expect_ok "$q" inspect --check "$data/tiny-flat"
expect_json "$q" logits -m "$nan/flat" --ids 1,2,3 --json
expect_json "$q" logits -m "$data/tiny-tied" --ids 1,2,3 --pos 0 --json
rm -rf "$nan"

# llama.cpp's spellings: -c / --ctx-size for --ctx, -t for --threads
expect_message "exceed the session's context of 2; raise --ctx" "$q" generate -m "$data/tiny-mm" --ids 1,2,3 -c 2
expect_ok "$q" generate -m "$data/tiny-mm" --ids 1,2,3 -n 2 -c 16
expect_ok "$q" generate -m "$data/tiny-mm" --ids 1,2,3 -n 2 --ctx-size 16 -t 1
expect_ok "$q" logits -m "$data/tiny-tied" --ids 1,2,3 -t 1
expect_message "-c expects an integer in [16, 16777216], got '3'" "$q" chat -m /nonexistent -c 3
expect_message "-t expects an integer in [1, 4096]" "$q" serve -m /nonexistent -t 0
# limits print as integers, and a fraction is refused rather than truncated (-m /nonexistent: were an option
# accepted, the run stops at the model instead of starting a server)
expect_message "--ctx expects an integer in [16, 16777216], got '99999999'" "$q" serve -m /nonexistent --ctx 99999999
expect_message "--ctx expects an integer in [16, 16777216], got '100.5'" "$q" serve -m /nonexistent --ctx 100.5
expect_message "--max-body expects an integer in [1, 1000000000000]" "$q" serve -m /nonexistent --max-body 0

# the prompt from a file (-f) or stdin (-p -) gives the same tokens as -p TEXT
gen() { "$q" generate -m "$syn/m" -n 12 --no-eos --spec-k 0 "$@" 2>/dev/null; }
full=$(gen -p "Hello")
printf 'Hello' >"$syn/prompt.txt"
[ "$(gen -f "$syn/prompt.txt")" = "$full" ]; check "-f FILE reads the prompt from the file" $?
[ "$(printf 'Hello' | gen -p -)" = "$full" ]; check "-p - reads the prompt from stdin" $?
expect_message "-f: cannot open '$syn/none.txt'" "$q" generate -m "$syn/m" -f "$syn/none.txt"
expect_message "-p and -f both give the prompt" "$q" generate -m "$syn/m" -p Hello -f "$syn/prompt.txt"

# --stop: the output ends right before the first occurrence of a string from the middle of the greedy output
stop=$(printf %s "$full" | cut -c 20-30)
cut=$(gen -p "Hello" --stop "$stop")
[ -n "$stop" ] && [ "$cut" = "${full%%"$stop"*}" ] && [ "$cut" != "$full" ]; check "--stop '$stop' cuts the output there" $?
[ "$(gen -p "Hello" --stop "no such text")" = "$full" ]; check "--stop with no match changes nothing" $?
expect_message "--stop matches the generated text" "$q" generate -m "$syn/m" --ids 1,2 --stop x
# chat: the answer ends before the stop string too
chat() { printf 'Hello\n' | "$q" chat -m "$syn/m" --temperature 0 --no-think -n 12 --spec-k 0 "$@" 2>/dev/null; }
chat_full=$(chat)
chat_stop=$(printf %s "$chat_full" | cut -c 22-30)
chat_cut=$(chat --stop "$chat_stop")
[ -n "$chat_stop" ] && [ "$chat_cut" = "${chat_full%%"$chat_stop"*}> " ] && [ "$chat_cut" != "$chat_full" ]
check "chat --stop '$chat_stop' ends the answer there" $?
printf 'Hello\n' | "$q" chat -m "$syn/m" -n 4 -c 64 -t 1 --temperature 0 >/dev/null 2>&1; check "chat -c 64 -t 1" $?

# sampling without --seed prints the seed it drew; --seed with that value repeats the run
seed_line=$("$q" generate -m "$syn/m" -p Hello -n 8 --temperature 1 2>&1 >"$syn/sampled.txt" | grep '^seed: ')
seed=${seed_line#seed: }
[ -n "$seed" ]; check "sampling without --seed prints 'seed: N' ($seed_line)" $?
again=$("$q" generate -m "$syn/m" -p Hello -n 8 --temperature 1 --seed "$seed" 2>/dev/null)
[ -n "$seed" ] && [ "$again" = "$(cat "$syn/sampled.txt")" ]; check "--seed $seed repeats the sampled run" $?
greedy_err=$("$q" generate -m "$syn/m" -p Hello -n 4 2>&1 >/dev/null)
case $greedy_err in *"seed: "*) false ;; prompt*) true ;; *) false ;; esac; check "greedy generation prints no seed" $?
rm -rf "$syn"

# --version / version: the version, the git commit and the CUDA architectures (or that there are none)
ver=$("$q" --version 2>/dev/null)
has_line() { printf '%s\n' "$ver" | grep -q "$1"; }
has_line '^qwenrt [0-9][0-9.]*$' && has_line '^commit: \([0-9a-f][0-9a-f]*\|unknown\)$' &&
    has_line '^cuda architectures: .'
check "--version prints the version, the commit and the CUDA architectures" $?
[ -n "$ver" ] && [ "$("$q" version 2>/dev/null)" = "$ver" ]; check "qwenrt version prints the same" $?

# serve --host: names and IPv6 literals resolve (the run then stops at the missing model, before binding);
# a host that does not resolve is an error naming --host
expect_message "--host 'no-such-host.invalid' does not resolve" "$q" serve -m /nonexistent --host no-such-host.invalid
expect_message "/nonexistent/tokenizer.json" "$q" serve -m /nonexistent --host ::1
expect_message "/nonexistent/tokenizer.json" "$q" serve -m /nonexistent --host "[::1]"
expect_message "/nonexistent/tokenizer.json" "$q" serve -m /nonexistent --host localhost
# the prefill piece override: a bad value is an error naming the variable, a good one runs
for piece in 100 0 16384 x; do
    expect_message "QRT_PREFILL_PIECE" env QRT_PREFILL_PIECE=$piece "$q" generate -m "$data/tiny-mm" --ids 1,2 -n 1
done
expect_ok env QRT_PREFILL_PIECE=64 "$q" generate -m "$data/tiny-mm" --ids 1,2 -n 1
[ $fails -eq 0 ] && echo "cli_errors: all passed" || echo "cli_errors: $fails failed"
exit $fails
