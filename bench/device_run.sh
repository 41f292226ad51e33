#!/usr/bin/env bash
# Run kernelfix's GPU work on the lent device, from the repo root: bench/device_run.sh STEP...
# Installs the carried wheels (.whl, built by ../shared/tools/device-wheels) and kernelfix
# itself, then runs each STEP, logging under $OUT (at most 8 files come back: small logs
# plain, everything else in one tarball). STEP@SECONDS bounds a step, so one slow step
# can't eat the call's whole device time and the later steps still report.
set -o pipefail
: "${OUT:?OUT must be set}"
if [ "$1" = "--one" ]; then set -- "$2"; else
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
python3 -m pip install -q --no-deps --no-index --no-build-isolation --no-compile --upgrade --target /tmp/kf . >/dev/null || exit 1
export PYTHONPATH=/tmp/kf:/tmp/site LITELLM_LOCAL_MODEL_COST_MAP=True PYTHONUNBUFFERED=1
mkdir -p /tmp/kfout
for step in "$@"; do
  echo "=== $step ($(date +%T))"
  case $step in
    *@*) timeout -k 10 "${step#*@}" bash "$0" --one "${step%@*}" || echo "=== ${step%@*} ended with $? (124: out of time)" ;;
    *) bash "$0" --one "$step" ;;
  esac
done
  # Files under 8 MB only: a larger tarball does not come back from the device, and writing 244 MB of one cost a
  # call its last seconds (rc 124 after the work had ended).
  (cd /tmp/kfout && find . -type f -size -8M -print0 | tar czf "$OUT/artifacts.tgz" --null -T - 2>/dev/null)
  ls -la "$OUT"
  exit 0
fi
for step in "$@"; do
  case $step in
    probe) bash bench/device_probe.sh 2>&1 | tee "$OUT/probe.txt" ;;
    unmap-race) python3 -P bench/arena_unmap_race.py 2>&1 | tee "$OUT/unmap_race.log" ;;
    ncu) bash bench/ncu_capture.sh /tmp/kfout/ncu ;;
    gpu-tests) python3 -P -m pytest -m gpu -q -s -p no:cacheprovider -o addopts="" --timeout 300 2>&1 | tee "$OUT/gpu_tests.log" | grep -E "^\[cuda\]|PASS|FAIL|passed|failed|Error" ;;
    gpu-n:*) python3 -P -m pytest -m gpu -n ${step#gpu-n:} -v -rfE --durations 25 -p no:cacheprovider -o addopts="" --timeout 300 tests > "$OUT/gpu_n${step#gpu-n:}.log" 2>&1; grep -E "FAILED|ERROR|passed|failed|^[0-9.]+s call" "$OUT/gpu_n${step#gpu-n:}.log" | tail -60 ;;
    gpu-tests:*) python3 -P -m pytest -m gpu -q -s -p no:cacheprovider -o addopts="" --timeout 300 -k "${step#gpu-tests:}" 2>&1 | tee "$OUT/gpu_tests.log" | grep -E "^\[cuda\]|PASS|FAIL|passed|failed|Error" ;;
    batch) bash bench/batch_demo.sh "$OUT" /tmp/kfout/batch ;;
    batch-2gpu) python3 -P bench/batch_two_gpus.py --work /tmp/kf2gpu --report /tmp/kfout/batch_2gpu 2>&1 | tee "$OUT/batch_2gpu.log" ;;
    profile) PROFILE_ARTIFACTS=/tmp/kfout/profile python3 -P -m pytest -m gpu -q -s -p no:cacheprovider -o addopts="" --timeout 600 tests/test_profile_gpu.py 2>&1 | tee "$OUT/profile_gpu.log" | grep -E "^\[cuda\]|summary:|warnings:|passed|failed|Error" ;;
    hostile) python3 -P -m pytest -m gpu -q -s -rs -p no:cacheprovider -o addopts="" --timeout 300 tests/hostile tests/test_sandbox.py 2>&1 | tee "$OUT/hostile.log" | grep -E "^\[cuda|sandbox on the device|^inside|PASS|FAIL|SKIP|passed|failed|Error" ;;
    sandbox-gpu) python3 -P bench/sandbox_gpu_probe.py 2>&1 | tee "$OUT/sandbox_gpu.log" ;;
    corpus) python3 -P -m pytest -m gpu -v -rA -n 6 --durations 15 -p no:cacheprovider -o addopts="" --timeout 400 tests/test_corpus.py tests/test_correctness_checks.py tests/test_agent_gpu.py tests/hostile tests/test_sandbox.py > "$OUT/corpus_gpu.log" 2>&1; grep -E "PASSED|FAILED|ERROR|passed|failed|slowest|^[0-9.]+s call" "$OUT/corpus_gpu.log" | tail -150 ;;
    corpus-list:*) python3 -P -m pytest -m gpu -v -rA -n 8 --durations 20 -p no:cacheprovider -o addopts="" --timeout 400 $(cat "${step#corpus-list:}") > "$OUT/corpus_rest.log" 2>&1; grep -E "PASSED|FAILED|ERROR|passed|failed|slowest|^[0-9.]+s call" "$OUT/corpus_rest.log" | tail -150 ;;
    search) python3 bench/search_rounds.py --out /tmp/kfout/search 2>&1 | tee "$OUT/search_rounds.log" | grep -v "^turn " ;;
    judge-bench) python3 bench/judge_stages.py --out "$OUT/judge_stages.json" 2>&1 | tee "$OUT/judge_stages.log" ;;
    smoke) for c in gelu_triton gelu_cuda; do python3 -P -m kernelfix eval tests/kernelbench/level1/88_MinGPTNewGelu.py bench/candidates/$c.py --json > /tmp/kfout/smoke_$c.json; python3 -c "import json,sys; v=json.load(open('/tmp/kfout/smoke_$c.json')); print('$c', v['category'], v['message'], v['stage_seconds'], v['breakdown'], v['speedup_eager'], v['warnings'][:3])"; done 2>&1 | tee "$OUT/smoke.log" ;;
    smoke-big) for t in 19_ReLU:relu_triton 23_Softmax:softmax_triton; do /usr/bin/time -v python3 -P -m kernelfix eval tests/kernelbench/level1/${t%%:*}.py bench/candidates/${t##*:}.py --json > /tmp/kfout/big_${t%%:*}.json 2> /tmp/kfout/big_${t%%:*}.time; python3 -c "import json; v=json.load(open('/tmp/kfout/big_${t%%:*}.json')); print('${t%%:*}', v['category'], v['message'], v['stage_seconds'], v['breakdown'], v['speedup_eager'])"; grep -E "Maximum resident|Elapsed" /tmp/kfout/big_${t%%:*}.time; done 2>&1 | tee "$OUT/smoke_big.log" ;;
    latency) [ -d .oldjudge ] && python3 -m pip install -q --no-deps --no-index --no-build-isolation --no-compile --upgrade --target /tmp/oldkf .oldjudge >/dev/null && LATENCY_ARGS="$LATENCY_ARGS --old-judge /tmp/oldkf"
      python3 -P bench/judge_latency.py --out "$OUT/latency.json" ${LATENCY_ARGS:-} 2>&1 | tee "$OUT/latency.log" ;;
    throughput) # THROUGHPUT_DEFAULT_ROUNDS=2: the default configuration's steady state and total too (issue 33, t38)
      python3 -P bench/judge_throughput.py --rounds ${THROUGHPUT_DEFAULT_ROUNDS:-1} --out "$OUT/throughput.json" 2>&1 | tee "$OUT/throughput.log" ;;
    throughput-reward) # issue 33: the bench as a reward loop judges (kernelfix.rewards: no sanitizer); THROUGHPUT_ROUNDS=2 adds the steady state
      python3 -P bench/judge_throughput.py --sanitize off --rounds ${THROUGHPUT_ROUNDS:-1} --label reward --out "$OUT/throughput_reward.json" 2>&1 | tee "$OUT/throughput_reward.log" ;;
    throughput-old) # issue 33: the landed code (old-install) on the same bench, for the ratio
      PYTHONPATH=/tmp/oldkf:/tmp/site python3 -P bench/judge_throughput.py --label landed --out "$OUT/throughput_old.json" 2>&1 | tee "$OUT/throughput_old.log" ;;
    throughput-reward-old) # the landed code (old-install first: .oldkf) on the bench as a reward loop judges, one round: the cold round's ratio
      PYTHONPATH=/tmp/oldkf:/tmp/site python3 -P bench/judge_throughput.py --sanitize off --label landed-reward --out "$OUT/throughput_reward_old.json" 2>&1 | tee "$OUT/throughput_reward_old.log" ;;
    throughput-reward-again) # throughput-reward's cold round once more, after another step (the machine's state)
      python3 -P bench/judge_throughput.py --sanitize off --label reward-again --out "$OUT/throughput_reward_again.json" 2>&1 | tee "$OUT/throughput_reward_again.log" ;;
    load-noise) python3 -P bench/load_noise.py --out "$OUT/load_noise.json" ${NOISE_ARGS:-} 2>&1 | tee "$OUT/load_noise.log" ;;
    gpu-lease) python3 -P -m pytest -m gpu -q -rfE -p no:cacheprovider -o addopts="" --timeout 300 tests/test_gpu_lease.py 2>&1 | tee "$OUT/gpu_lease.log" | tail -5 ;;
    baseline:*) [ -f .kb/baseline.json ] && cp .kb/baseline.json "$OUT/baseline.json"  # an earlier call's rows, carried back in: resume
      python3 -P -m kernelfix baseline ${step#baseline:} --out "$OUT/baseline.json" --kernelbench-times .kb/baseline_time_torch.json --workers ${BASELINE_WORKERS:-4} > "$OUT/baseline.log" 2>&1; tail -60 "$OUT/baseline.log" ;;
    backward-sweep) # issue 25: which level 1-2 tasks have a backward, eager and torch.compile fwd / fwd+bwd; then the backward GPU tests
      [ -f .kb/baseline_backward.json ] && cp .kb/baseline_backward.json "$OUT/baseline_backward.json"  # resume
      python3 -P -m kernelfix baseline --backward ${BACKWARD_DIRS:-.kb/level1 .kb/level2} --out "$OUT/baseline_backward.json" --workers ${BASELINE_WORKERS:-4} > "$OUT/baseline_backward.log" 2>&1; tail -60 "$OUT/baseline_backward.log"
      python3 -P -m pytest -m gpu -q -s -p no:cacheprovider -o addopts="" --timeout 300 tests/test_backward.py 2>&1 | tee "$OUT/backward_gpu.log" | grep -E "passed|failed|Error"
      python3 -P -m kernelfix eval examples/tasks/scale_train.py examples/candidates/scale_train_triton.py --json > /tmp/kfout/backward_eval.json; python3 -c "import json; v=json.load(open('/tmp/kfout/backward_eval.json')); print(v['category'], v['message'], v['speedup_eager'], (v.get('timings') or {}).get('backward'))" 2>&1 | tee "$OUT/backward_eval.log" ;;
    backward-memory) # issue 25: the tasks that met the GPU's memory under --backward, each with its peaks (own file: a subset run keeps only its rows)
      python3 -P -m kernelfix baseline --backward ${MEMORY_TASKS:-.kb/level1/38_L1Norm_.py .kb/level1/39_L2Norm_.py .kb/level1/90_cumprod.py .kb/level1/21_Sigmoid.py .kb/level1/36_RMSNorm_.py .kb/level1/45_Average_Pooling_2D.py} --out "$OUT/baseline_backward_memory.json" --workers 1 > "$OUT/baseline_backward_memory.log" 2>&1; tail -30 "$OUT/baseline_backward_memory.log"
      python3 bench/backward_report.py "$OUT/baseline_backward_memory.json" | head -20 ;;
    backward-profile) # issue 25: the profile split after review, on the GPU
      python3 -P -m pytest -m gpu -q -s -p no:cacheprovider -o addopts="" --timeout 300 tests/test_backward.py 2>&1 | tee "$OUT/backward_gpu.log" | grep -E "passed|failed|Error"
      python3 -P -m kernelfix eval examples/tasks/scale_train.py examples/candidates/scale_train_triton.py --profile --json > /tmp/kfout/backward_profile.json 2> "$OUT/backward_profile.err"
      python3 -c "import json; v=json.load(open('/tmp/kfout/backward_profile.json')); p=v.get('profile') or {}; print(v['category'], v['message'], p.get('source'), [(k.get('name'), k.get('part'), k.get('calls')) for k in p.get('kernels', [])]); print('\n'.join(p.get('highlights') or []))" 2>&1 | tee "$OUT/backward_profile.log" ;;
    tune-hf:*) # the H200 proof's parts side by side, one per GPU (HF_S: each part's bound; TUNE_HF_BUDGETS, HF_INFER_PARTS, HF_TUNE_ROUNDS, HF_ARGS: a shorter call): tune-hf:llama-infer,llama-train,moe,gpu-tests
      mkdir -p /tmp/kfout/hf; gpu=0
      for part in $(echo "${step#tune-hf:}" | tr , ' '); do
        case $part in
          llama-infer) cmd="python3 -P bench/tune_hf.py --family llama --parts ${HF_INFER_PARTS:-tune prefill generate profile} --tune-rounds ${HF_TUNE_ROUNDS:-10} ${HF_ARGS:-} --out /tmp/kfout/hf/$part" ;;
          llama-train) cmd="python3 -P bench/tune_hf.py --family llama --parts train-tune train --tune-rounds 10 --out /tmp/kfout/hf/$part" ;;
          moe) cmd="python3 -P bench/tune_hf.py --family qwen3_moe --parts tune prefill generate --tune-rounds 10 --out /tmp/kfout/hf/$part" ;;
          gpu-tests) cmd="python3 -P -m pytest -m gpu -n 4 -v -rfE -p no:cacheprovider -o addopts= --timeout 400 ${HF_TESTS:-tests/test_hf_kernels.py tests/test_profile_gpu.py tests/test_kernel_source_gpu.py tests/test_sanitizer_gpu.py}" ;;
        esac
        (CUDA_VISIBLE_DEVICES=$gpu timeout -k 10 ${HF_S:-560} $cmd > "$OUT/$part.log" 2>&1) &
        gpu=$((gpu + 1))
      done
      wait
      for d in /tmp/kfout/hf/*/; do find "$d" -name "*.json" -size -2M | tar czf "$OUT/hf_$(basename $d).tgz" -T - 2>/dev/null; done
      for f in "$OUT"/*.log; do echo "##### $f"; tail -40 "$f" | cut -c1-400; done ;;
    tune) python3 -P bench/tune_transformer.py --out /tmp/kfout/tune --save-profiles "$OUT/profiles" ${TUNE_ARGS:-} 2>&1 | tee "$OUT/tune.log"
      cp /tmp/kfout/tune/report.json "$OUT/tune_report.json" 2>/dev/null ;;
    fast-layout) python3 -P bench/fast_layout_replay.py --out "$OUT" --workdir /tmp/kf_fast_layout 2>&1 | tee "$OUT/fast_layout_replay.log" ;;
    capture-swap) python3 -P bench/capture_swap.py --out /tmp/kfout/capture_swap 2>&1 | tee "$OUT/capture_swap.log" ;;
    capture-shapes) python3 -P bench/capture_shapes.py --out /tmp/kfout/capture_shapes 2>&1 | tee "$OUT/capture_shapes.log" ;;
    swap-backward) python3 -P bench/swap_backward.py 2>&1 | tee "$OUT/swap_backward.log" ;;
    swap-cost) # issue 35: the added cost per swapped call, eager and compiled; against the landed kernelfix when old-install ran first
      python3 -P bench/swap_cost.py $([ -d /tmp/oldkf ] && echo --old /tmp/oldkf) --json /tmp/kfout/swap_cost.json 2>&1 | grep --line-buffered -v Warning | tee "$OUT/swap_cost.log" ;;
    swap-explain) # issue 35: what a compiled swap's guards and calls add to the kernel's (bench/swap_cost_explain.py)
      python3 -P bench/swap_cost_explain.py --out /tmp/kfout/swap_explain 2>&1 | grep --line-buffered -v Warning | tee "$OUT/swap_explain.log" ;;
    swap-explain-old) # the same with the kernelfix of .oldkf (old-install first)
      PYTHONPATH=/tmp/oldkf:/tmp/site python3 -P bench/swap_cost_explain.py --out /tmp/kfout/swap_explain_old 2>&1 | grep --line-buffered -v Warning | tee "$OUT/swap_explain_old.log" ;;
    compile-bench) python3 bench/compile_bench.py --out "$OUT" --workdir /tmp/kf_compile_bench 2>&1 | tee "$OUT/compile_bench.log" | grep -v '^{' ;;
    feedback-capture) bash bench/feedback_capture.sh /tmp/kfout/ncu_feedback ${CAPTURE_CASES:-} 2>&1 | tee "$OUT/feedback_capture.log"
        tar czf "$OUT/ncu_feedback.tgz" --exclude='*.ncu-rep' -C /tmp/kfout ncu_feedback; ls -la "$OUT/ncu_feedback.tgz" ;;
    fairness) for c in conv_direct_exact_cuda row_sum_tree_cuda; do t=$(sed -n 's/^# task: //p' tests/feedback/candidates/$c.py); case $t in kernelbench/*) t=tests/$t.py ;; *) t=tests/feedback/tasks/$t.py ;; esac
        python3 -P -m kernelfix eval "$t" tests/feedback/candidates/$c.py --json > /tmp/kfout/fairness_$c.json 2> /tmp/kfout/fairness_$c.err
        python3 -c "import json; v=json.load(open('/tmp/kfout/fairness_$c.json')); c=v.get('correctness') or {}; print('$c', v['category'], v['message'], [(t.get('trial'), t.get('variant'), t.get('ok'), t.get('mismatches'), t.get('max_abs_error'), t.get('error_vs_float64'), t.get('reference_error_vs_float64')) for t in c.get('trials', [])], v['stage_seconds'])"; done 2>&1 | tee "$OUT/fairness.log" ;;
    feedback-capture:*) bash bench/feedback_capture.sh /tmp/kfout/ncu_feedback ${step#feedback-capture:} 2>&1 | tee -a "$OUT/feedback_capture.log" ;;
    old-install) python3 -m pip install -q --no-deps --no-index --no-build-isolation --no-compile --upgrade --target /tmp/oldkf .oldkf >/dev/null && echo "landed kernelfix in /tmp/oldkf" ;;
    fairness-old) PYTHONPATH=/tmp/oldkf:/tmp/site bash "$0" --one fairness; mv "$OUT/fairness.log" "$OUT/fairness_old.log"; cat "$OUT/fairness_old.log" ;;
    cold-eval-old) PYTHONPATH=/tmp/oldkf:/tmp/site python3 -P bench/cold_eval.py --repeat ${COLD_REPEAT:-3} --out "$OUT/cold_eval_old.json" 2>&1 | tee "$OUT/cold_eval_old.log" ;;
    feedback-proof) python3 -P bench/feedback_proof.py --out "$OUT/feedback_proof.json" --parallel ${PROOF_PARALLEL:-4} ${PROOF_CASES:+--cases $PROOF_CASES} 2>&1 | tee "$OUT/feedback_proof.log" ;;
    feedback-pack) rm -f /tmp/kfout/ncu_feedback/*.ncu-rep; tar czf "$OUT/ncu_feedback.tgz" -C /tmp/kfout ncu_feedback; ls -la "$OUT/ncu_feedback.tgz" ;;
    fp32-gemm) python3 -P bench/fp32_gemm.py --out "$OUT/fp32_gemm.json" ${FP32_SIZES:+--sizes $FP32_SIZES} 2>&1 | tee "$OUT/fp32_gemm.log" ;;
    knowledge-gpu) KNOWLEDGE_GPU_LOG="$OUT/knowledge_gpu.jsonl" python3 -P -m pytest -m gpu -n ${KNOWLEDGE_WORKERS:-6} -q -rA -p no:cacheprovider -o addopts="" --timeout 300 tests/test_knowledge_gpu.py ${KNOWLEDGE_K:+-k "$KNOWLEDGE_K"} > "$OUT/knowledge_gpu.log" 2>&1; grep -E "^\[knowledge\]|^FAILED|^ERROR|passed|failed" "$OUT/knowledge_gpu.log" ;;
    zygote-imports) python3 -P bench/zygote_imports.py 2>&1 | tee "$OUT/zygote_imports.log" ;;
    fork-tree) python3 -P bench/fork_tree.py --rounds ${FORK_TREE_ROUNDS:-6} --json "$OUT/fork_tree.json" 2>&1 | tee "$OUT/fork_tree.log" ;;
    tests:*) # any tests (not only GPU-marked ones), files or node ids separated by commas, on this machine's CUDA build
      python3 -P -m pytest -q -rfE -p no:cacheprovider -o addopts="" --timeout 300 $(echo "${step#tests:}" | tr , ' ') > "$OUT/tests.log" 2>&1; tail -15 "$OUT/tests.log" ;;
    cold-eval-cuda) # issue 33: the cached-CUDA case alone (its first, unmeasured run builds the extension: about a minute)
      python3 -P bench/cold_eval.py --repeat ${COLD_REPEAT:-2} --out "$OUT/cold_eval_cuda.json" --case gelu_cuda_cached=tests/kernelbench/level1/88_MinGPTNewGelu.py:bench/candidates/gelu_cuda.py 2>&1 | tee "$OUT/cold_eval_cuda.log" ;;
    fused-check) # issue 33: the fused comparison kernels against the torch passes, compiled, at FUSED_MIN and past it
      python3 -P -m pytest -m gpu -q -rfE -p no:cacheprovider -o addopts="" --timeout 300 tests/test_fused_check.py 2>&1 | tee "$OUT/fused_check.log" | tail -5 ;;
    cold-eval-vs-old) # issue 33 (t38): a cold eval against the landed kernelfix (old-install first), the harness, and the harness given a bytecode cache, in the same rounds (COLD_OLD_CASE, else COLD_CASE, else both cases)
      c=${COLD_OLD_CASE:-$COLD_CASE}; python3 -P bench/cold_eval.py --repeat ${COLD_REPEAT:-3} --old /tmp/oldkf --naive-bytecode /tmp/kf_naive_bytecode --out "$OUT/cold_eval_vs_old.json" ${c:+--case $c} 2>&1 | tee "$OUT/cold_eval_vs_old.log" ;;
    cold-timeline) # issue 33 (t38): one cold eval's timeline (each process's start, imports, CUDA, survey, stages); --probe: the reference's start step by step
      c=${TIMELINE_CASE:-$COLD_CASE}; python3 -P bench/cold_timeline.py --repeat ${TIMELINE_REPEAT:-1} ${TIMELINE_ARGS:---probe} --out "$OUT/cold_timeline.json" ${c:+--case $c} 2>&1 | tee "$OUT/cold_timeline.log" ;;
    cold-timeline-old) # the same timeline of the landed kernelfix (old-install first)
      PYTHONPATH=/tmp/oldkf:/tmp/site python3 -P bench/cold_timeline.py --repeat 1 --out "$OUT/cold_timeline_old.json" ${COLD_CASE:+--case $COLD_CASE} 2>&1 | tee "$OUT/cold_timeline_old.log" ;;
    cold-eval) python3 -P bench/cold_eval.py --repeat ${COLD_REPEAT:-3} --out "$OUT/cold_eval.json" ${COLD_CASE:+--case $COLD_CASE} 2>&1 | tee "$OUT/cold_eval.log" ;;
    many-judges) python3 -P bench/many_judges.py --copies ${MANY_COPIES:-1} --out "$OUT/many_judges_${MANY_COPIES:-1}.json" ${MANY_ARGS:+--extra-args "$MANY_ARGS"} 2>&1 | tee "$OUT/many_judges_${MANY_COPIES:-1}.log" ;;
    fault-batch) python3 -P bench/fault_batch.py --hold-s ${FAULT_HOLD_S:-60} --leave-gib ${FAULT_LEAVE_GIB:-1} --out "$OUT/fault_batch.json" 2>&1 | tee "$OUT/fault_batch.log" ;;
    sanitizer-capture) # issue 32: compute-sanitizer's raw reports of tests/sanitizer's kernels (the CPU tests' fixtures)
      python3 -P bench/sanitizer_capture.py --out /tmp/kfout/sanitizer --parallel ${SAN_PARALLEL:-12} --timeout ${SAN_TIMEOUT:-60} 2>&1 | tee "$OUT/sanitizer_capture.log" ;;
    sanitizer-gpu) # issue 32: the sanitizer stage through the judge (verdicts and the judge's logs kept for docs and fixtures)
      SANITIZER_ARTIFACTS=/tmp/kfout/sanitizer/judge python3 -P -m pytest -m gpu -q -s -rfE -n ${SAN_N:-3} -p no:cacheprovider -o addopts="" --timeout 300 tests/test_sanitizer_gpu.py > "$OUT/sanitizer_gpu.log" 2>&1
      grep -E "^\[cuda\]|inputs |note:|^(FAILED|ERROR)|passed|failed" "$OUT/sanitizer_gpu.log" | tail -60 ;;
    serve-latency) # issue 33: a warm served verdict (kernelfix serve's app and a client) against the in-process kernelfix.Judge, same run
      python3 -P bench/serve_latency.py --out "$OUT/serve_latency.json" ${SERVE_LATENCY_ARGS:-} 2>&1 | tee "$OUT/serve_latency.log" | grep -v '^{' ;;
    serve-latency-old) # t38: the same bench on the landed code (old-install first: .oldkf), its JSON for serve-latency's --against
      PYTHONPATH=/tmp/oldkf:/tmp/site python3 -P bench/serve_latency.py --label landed --seed 3838 --out /tmp/kfout/serve_latency_old.json ${SERVE_LATENCY_ARGS:-} 2>&1 | tee "$OUT/serve_latency_old.log" | grep -v '^{' ;;
    serve-latency-vs-old) # t38: serve-latency, its verdicts and paced median against serve-latency-old's (run before it in the call)
      python3 -P bench/serve_latency.py --label ${SERVE_LABEL:-new} --seed 3838 --against /tmp/kfout/serve_latency_old.json --out "$OUT/serve_latency.json" ${SERVE_LATENCY_ARGS:-} 2>&1 | tee "$OUT/serve_latency.log" | grep -v '^{' ;;
    first-call) # issue 33: a fresh candidate worker's first call of a cached Triton kernel, and what doing things ahead takes off
      python3 -P bench/triton_first_call.py --out "$OUT/first_call.json" ${FIRST_CALL_ARGS:-} 2>&1 | tee "$OUT/first_call.log" ;;
    baseline-compile) # issue 33: a cold baseline's torch.compile: bytecode or not, inductor's compile pool or 1 thread (fresh interpreters, empty caches)
      python3 -P bench/baseline_compile_cold.py --out "$OUT/baseline_compile.json" 2>&1 | tee "$OUT/baseline_compile.log" ;;
    arena-cost) # issue 33: a 6 GiB arena made, filled, opened by another mapping, given back; torch's allocator beside
      python3 -P bench/arena_cost.py 2>&1 | tee "$OUT/arena_cost.log" ;;
    judge-passes) # issue 33: the reference worker's passes over one published-size trial, each beside its bandwidth floor
      python3 -P bench/judge_passes.py --out "$OUT/judge_passes.json" ${JUDGE_PASSES_ARGS:-} 2>&1 | tee "$OUT/judge_passes.log" ;;
    kernel-source-gpu) # races on global memory and atomics' uses read from the source, judged (verdicts in the tarball); KS_FILES: more GPU test files in the same run; KS_WARM=1: the profile-stage bench's builds and baselines beside it
      [ -n "$KS_WARM" ] && { python3 -P bench/profile_stage.py --warm-only > "$OUT/profile_stage_warm.log" 2>&1 & }
      KERNEL_SOURCE_ARTIFACTS=/tmp/kfout/kernel_source python3 -P -m pytest -m gpu -q -s -rfE -n ${KS_N:-6} -p no:cacheprovider -o addopts="" --timeout 300 tests/test_kernel_source_gpu.py ${KS_FILES:-} > "$OUT/kernel_source_gpu.log" 2>&1
      grep -E "^\[cuda\]|reproduced|^(FAILED|ERROR)|passed|failed" "$OUT/kernel_source_gpu.log" | tail -60; wait ;;
    profile-stage) # the profile stage's seconds on one-kernel candidates (3 repeats each, cached builds) and where they go; STAGE_ARGS: --variants, --skip-warm
      python3 -P bench/profile_stage.py --repeat ${STAGE_REPEAT:-3} ${STAGE_ARGS:-} --out "$OUT/profile_stage.json" 2>&1 | tee "$OUT/profile_stage.log" ;;
    *) echo "unknown step $step" ;;
  esac
done
