"""Checks of the benchmark scripts that need neither torch nor a build (ctest: bench_scripts):
the thread sweep arithmetic of bench_common.py, the PyTorch description taken from the torch that
ran, llama_compare.py's FLOP count, lora_step.py's ratios, and
compare.py's tables rendered from a recorded run (--from-json) of a 16-core machine with
a PyTorch version named nowhere in the scripts.

    python3 -m unittest discover -s benchmarks -p 'test_bench_scripts.py'
"""
import json
import os
import subprocess
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_common  # noqa: E402
import compare  # noqa: E402
import llama_compare  # noqa: E402
import lora_step  # noqa: E402


class ThreadSweep(unittest.TestCase):
    def test_parse_threads_sorts_and_defaults(self):
        self.assertEqual(bench_common.parse_threads("16,1,4,2,8,2"), [1, 2, 4, 8, 16])
        self.assertEqual(bench_common.parse_threads(""), bench_common.default_threads())
        self.assertRaises(ValueError, bench_common.parse_threads, "0,2")

    def test_default_threads_reach_the_cpu_count(self):
        counts = bench_common.default_threads()
        self.assertEqual(counts[0], 1)
        self.assertEqual(counts[-1], os.cpu_count())

    def test_speedup_and_efficiency_from_the_smallest_count(self):
        s = bench_common.sweep({2: 100.0, 16: 25.0, 4: 60.0})
        self.assertEqual(s[2], (1.0, 1.0))
        self.assertAlmostEqual(s[4][0], 100 / 60)
        self.assertAlmostEqual(s[16][0], 4.0)
        self.assertAlmostEqual(s[16][1], 0.5)  # 4x on 8x the threads
        rate = bench_common.sweep({1: 50.0, 2: 90.0}, rate=True)
        self.assertAlmostEqual(rate[2][0], 1.8)
        self.assertAlmostEqual(rate[2][1], 0.9)

    def test_thread_env_sets_every_pool(self):
        env = bench_common.thread_env(16, base={"PATH": "/bin"})
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            self.assertEqual(env[var], "16")


class TorchDescription(unittest.TestCase):
    def test_the_imported_torch_is_described(self):
        show = ("PyTorch built with:\n  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build\n"
                "  - Intel(R) MKL-DNN v3.7.1 (Git Hash 8d263e6)\n  - CPU capability usage: AVX512\n"
                "  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, TORCH_VERSION=2.11.0,\n")
        fake = types.SimpleNamespace(__version__="2.11.0+cpu", __file__="/opt/venv/torch/__init__.py",
                                     __config__=types.SimpleNamespace(show=lambda: show))
        info = bench_common.torch_info(fake)
        self.assertEqual(info["torch_version"], "2.11.0+cpu")
        self.assertEqual(bench_common.describe_torch(info),
                         "PyTorch 2.11.0+cpu (/opt/venv/torch; BLAS mkl; MKL 2024.2; oneDNN 3.7.1; AVX512)")
        self.assertEqual(bench_common.describe_torch({"torch_version": "1.13.0a0"}), "PyTorch 1.13.0a0")


def step(framework, config, threads, ms, precision="fp32"):
    flops = compare.step_flops(config)
    r = dict(kind="train_step", framework=framework, config=config, threads=threads, round=0, median_ms=ms,
             p25_ms=ms, p75_ms=ms, min_ms=ms, max_ms=ms, reps=3, flops=flops, gflops=flops / (ms * 1e6),
             peak_rss_mib=1000.0, baseline_rss_mib=10.0,
             phases_median_ms=dict(zero_grad=0.1, forward_loss=ms / 3, backward=ms / 2, step=ms / 6))
    if precision == "bf16":
        r["precision"] = "bf16"
        if framework == "xgrad":
            r["bf16_path"] = "oneDNN bf16 matmul (avx512_core_amx)"
    if framework == "torch":
        r.update(torch_version="2.11.0", torch_path="/opt/venv/torch", torch_blas="mkl")
    return r


def gemm(framework, kind, threads, gflops):
    ms = 2.0 * 1024 ** 3 / (gflops * 1e6)
    return dict(kind="gemm", framework=framework, gemm=kind, threads=threads, round=0, n=1024, median_ms=ms,
                min_ms=ms, gflops=gflops, isa="avx512_core_amx", blas="OpenBLAS 0.3.21")


class CompareReport(unittest.TestCase):
    def test_sweep_tables_from_a_recorded_run(self):
        records = [dict(kind="meta", framework="", command="python3 benchmarks/compare.py --threads 1,2",
                        rounds=1, threads=[1, 2], configs=["gpt2s"], cpu="A 16-core CPU", cpus=16,
                        date="2030-01-02"),
                   gemm("xgrad", "onednn", 1, 100.0), gemm("xgrad", "onednn", 2, 190.0),
                   gemm("torch", "torch_mm", 1, 80.0), gemm("torch", "torch_mm", 2, 150.0),
                   gemm("xgrad", "bf16", 2, 900.0),
                   step("xgrad", "gpt2s", 1, 8000.0), step("xgrad", "gpt2s", 2, 4500.0),
                   step("torch", "gpt2s", 1, 9000.0), step("torch", "gpt2s", 2, 6000.0),
                   step("xgrad", "gpt2s", 1, 5000.0, "bf16"), step("xgrad", "gpt2s", 2, 3000.0, "bf16"),
                   step("torch", "gpt2s", 1, 6000.0, "bf16"),
                   dict(kind="error", framework="torch", threads=2, round=0, error="boom",
                        command="python3 compare.py --worker train --config gpt2s --bf16 --threads 2")]
        with tempfile.TemporaryDirectory() as tmp:
            path, md = os.path.join(tmp, "run.jsonl"), os.path.join(tmp, "run.md")
            with open(path, "w") as f:
                f.write("".join(json.dumps(r) + "\n" for r in records))
            p = subprocess.run([sys.executable, os.path.join(HERE, "compare.py"), "--from-json", path,
                                "--markdown", md], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(md) as f:
                markdown = f.read()
        out = p.stdout
        # The PyTorch that ran, and the recorded machine.
        self.assertIn("xgrad vs PyTorch 2.11.0 (/opt/venv/torch; BLAS mkl)", out)
        self.assertIn("A 16-core CPU, 16 CPUs", out)
        self.assertIn("Measured 2030-01-02 on A 16-core CPU (16 CPUs), PyTorch 2.11.0", markdown)
        self.assertNotIn("1.13", out + markdown)
        # gpt2s: 0.639 TFLOP a step (bench_train_step prints 6.39011e+11 for it).
        self.assertAlmostEqual(compare.step_flops("gpt2s") / 6.39011e11, 1.0, places=5)
        # The limit at each count (190 at 2 threads: 1.90x, 95%), the step's speedup and efficiency
        # (8.00 s -> 4.50 s: 1.78x, 89%), its % of that count's limit (142.0 / 190: 75%), and its
        # speedup over the limit's (1.78 / 1.90: 94%).
        for text in (out, markdown):
            self.assertRegex(text, r"limit: fastest fp32 gemm, GFLOP/s\s*\|?\s*100\.0\s*\|?\s*190\.0 1\.90x 95%")
            self.assertRegex(text, r"gpt2s fp32 xgrad\s*\|?\s*8\.00 s \[80%\]\s*\|?\s*4\.50 s 1\.78x 89% \[75%\]"
                                   r"\s*\|?\s*94%")
            self.assertRegex(text, r"gpt2s fp32 PyTorch\s*\|?\s*9\.00 s \[71%\]\s*\|?\s*6\.00 s 1\.50x 75% \[56%\]")
            # The failed run leaves its cell empty; the other counts are still reported.
            self.assertRegex(text, r"gpt2s bf16 PyTorch\s*\|?\s*6\.00 s \[\d+%\]\s*\|?\s*-")
        # The main table: each framework at its fastest count; gpt2s's fp32 target is 80% of the
        # fastest fp32 gemm (142.0 / 190 = 75%: missed) and its bf16 target 1.3x PyTorch's bf16.
        self.assertRegex(out, r"gpt2s .*1\.33x .* >= 1x met, >= 80% limit MISSED")
        self.assertRegex(out, r"gpt2s .*2\.00x .*>= 1\.3x PyTorch bf16 met")  # 6000 ms (1t) / 3000 ms (2t)
        self.assertIn("| gpt2s | 1 1024 768 12 3072 12 V256 |", markdown)


class LlamaStepFlops(unittest.TestCase):
    def test_smollm2_step_at_context_1024(self):
        # Per layer: q, k, v, o 2*T*576*(2*576 + 2*192) = 1.812 G, the MLP 6*T*576*1536 = 5.436 G,
        # the attention 4*T^2*576 = 2.416 G; the tied head 2*T*576*49152 = 57.98 G; backward twice.
        per_layer = 1_811_939_328 + 5_435_817_984 + 2_415_919_104
        self.assertEqual(llama_compare.step_flops("smollm2-135m", 30, 1024), 3 * (30 * per_layer + 57_982_058_496))


class LoraStepTable(unittest.TestCase):
    def test_ratios_to_the_full_step_of_the_same_binary(self):
        def run(b, c, steps, peak):
            return {"bin": b, "config": c, "step_times_s": steps, "peak_rss_mib": peak}
        records = [run("new", "full", [9.0, 4.0, 4.2], 4400.0), run("new", "lora", [8.0, 2.8, 3.0], 4000.0),
                   run("new", "full", [9.0, 3.8, 4.0], 4410.0), run("new", "lora", [8.0, 2.6, 2.9], 4050.0),
                   run("old", "lora", [8.0, 3.5], 4100.0)]
        rows = {(r[0], r[1]): r for r in lora_step.summarize(records)}
        # The first step of each run is left out: medians of 4.0, 4.2, 3.8, 4.0 and 2.8, 3.0, 2.6, 2.9.
        self.assertAlmostEqual(rows[("new", "full")][2], 4.0)
        self.assertAlmostEqual(rows[("new", "lora")][2], 2.85)
        self.assertAlmostEqual(rows[("new", "lora")][4], 2.85 / 4.0)
        self.assertAlmostEqual(rows[("new", "lora")][6], 4050.0 / 4410.0)  # the largest peaks
        self.assertIsNone(rows[("old", "lora")][4])  # no full run of that binary
        text = lora_step.table(lora_step.summarize(records))
        self.assertIn("| new | lora | 2.85 s | 2.80, 3.00, 2.60, 2.90 | 0.71x | 4050 MiB | 0.92x |", text)
        # Without a full run, the checkpointed full run is the reference.
        ckpt = {(r[0], r[1]): r for r in lora_step.summarize(
            [run("x", "full+ckpt", [9.0, 8.0], 2000.0), run("x", "lora+ckpt", [9.0, 6.0], 500.0)])}
        self.assertAlmostEqual(ckpt[("x", "lora+ckpt")][4], 0.75)
        self.assertAlmostEqual(ckpt[("x", "lora+ckpt")][6], 0.25)
        self.assertEqual(lora_step.flags("lora+ckpt", 16, ["q_proj", "v_proj"]),
                         ["--lora", "16", "--lora-targets", "q_proj", "v_proj", "--gradient-checkpointing"])


if __name__ == "__main__":
    unittest.main()
