"""onnxload: ONNX Runtime CPU inference on a small convolutional network, reporting JSON lines.

Why ours: the ONNX Runtime workload needs a model without a download and a rate and latency
percentile per report. The model is built here with `onnx.helper`, its weights drawn from a
seeded generator, so every run (host capture, lab guest, test) infers on the same network.

Design:
- The network: NCHW input 1x3xSIZExSIZE, Conv 3x3 (3 -> C) + Relu, Conv 3x3 (C -> 2C) + Relu,
  MaxPool 2x2, Conv 3x3 (2C -> 2C) + Relu, GlobalAveragePool, Flatten, Gemm (2C -> 10).
  The defaults (SIZE 16, C 8: about 1 MFLOP) are sized for the lab, not the host: TCG emulates
  every floating-point lane in software, and a 15-MFLOP model (SIZE 32, C 16) that took 115 us
  on this 2-core host took 470 ms in the 2-vCPU guest (about 4,000x, 2026-11-29). At the
  defaults the host runs some thousands of inferences a second, the guest tens.
- One InferenceSession with intra_op_num_threads = --threads (default 2, the lab's vCPUs) and
  sequential execution (no inter-op pool): ORT runs a Conv on the calling thread plus
  --threads - 1 pool threads. The main thread infers in a closed loop (optionally pausing
  --think-us after each inference) and times each `run` call.
- Every --report-ms it prints one JSON line on stdout:
    {"inferences_per_s": N, "latency_p50_us": N, "latency_p99_us": N, "inferences": N}
  the rate over the report's own elapsed time, exact percentiles of the latencies in it.
  With --duration S it stops after S seconds (the last, partial report included); without,
  it runs until SIGTERM or SIGINT (a ladder's service).
- ORT 1.32 names none of its threads on Linux: they inherit the process's comm. The bundled
  `{onnxload}` is a `#!` script named `onnxload`, which exec makes the comm; the process also
  names itself (prctl PR_SET_NAME) before ORT starts a thread, so its threads carry the comm a
  profile's PcommPrefix targets even when started as `python onnxload.py`. "onnxload: ready"
  goes to stderr after the first inference, once every thread exists (the caller, the pool
  thread, and one that importing onnxruntime starts and that sleeps).
- OPENBLAS_NUM_THREADS=1 (and OMP) before numpy is imported: numpy's OpenBLAS pool would add an
  idle thread per further CPU under the same comm (measured: one on a 2-core host).

Bad options exit 2 with usage on stderr; a missing onnxruntime or onnx exits 1 saying which
interpreter lacks it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import sys
import time
from types import FrameType
from typing import Any

PR_SET_NAME = 15
COMM = b"onnxload"
CLASSES = 10


def name_this_process() -> None:
    """Set the calling thread's comm to `onnxload`; threads created after inherit it."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the name is cosmetic there
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, COMM, 0, 0, 0)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def nonnegative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


class UsageParser(argparse.ArgumentParser):
    """argparse that exits 2 with the usage line and the problem, nothing on stdout."""

    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        print(f"onnxload: {message}", file=sys.stderr)
        sys.exit(2)


def options(argv: list[str]) -> argparse.Namespace:
    parser = UsageParser(prog="onnxload", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--threads", type=positive_int, default=2,
                        help="ORT intra-op threads, the calling thread included (default 2)")
    parser.add_argument("--size", type=positive_int, default=16, help="input image side (default 16)")
    parser.add_argument("--channels", type=positive_int, default=8,
                        help="first Conv's output channels (default 8)")
    parser.add_argument("--report-ms", type=positive_int, default=1000,
                        help="one JSON line per this many ms (default 1000)")
    parser.add_argument("--duration", type=positive_float, default=None,
                        help="stop after this many seconds (default: run until SIGTERM)")
    parser.add_argument("--think-us", type=nonnegative_int, default=0,
                        help="pause after each inference (default 0: a closed loop)")
    parser.add_argument("--seed", type=nonnegative_int, default=1, help="weights' seed (default 1)")
    parser.add_argument("--no-spin", action="store_true",
                        help="pool threads block between runs instead of spinning (ORT's default)")
    args = parser.parse_args(argv)
    if args.size < 4:
        parser.error(f"--size {args.size}: the network pools by 2 after two 3x3 convolutions; use 4 or more")
    return args


def build_model(*, size: int, channels: int, seed: int) -> bytes:
    """The serialized ONNX model: deterministic for (size, channels, seed)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def weight(name: str, *shape: int) -> Any:
        # He-style scale keeps activations in range through the Relus (no NaN/inf drift)
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        values = rng.standard_normal(shape).astype(np.float32) * np.float32((2.0 / fan_in) ** 0.5)
        return numpy_helper.from_array(values, name)

    wide = 2 * channels
    initializers = [
        weight("conv1_w", channels, 3, 3, 3), weight("conv1_b", channels),
        weight("conv2_w", wide, channels, 3, 3), weight("conv2_b", wide),
        weight("conv3_w", wide, wide, 3, 3), weight("conv3_b", wide),
        weight("fc_w", CLASSES, wide), weight("fc_b", CLASSES),
    ]
    same = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    nodes = [
        helper.make_node("Conv", ["image", "conv1_w", "conv1_b"], ["c1"], **same),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "conv2_w", "conv2_b"], ["c2"], **same),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p2", "conv3_w", "conv3_b"], ["c3"], **same),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["g3"]),
        helper.make_node("Flatten", ["g3"], ["f3"]),
        helper.make_node("Gemm", ["f3", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "threadwise_onnxload",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, CLASSES])],
        initializer=initializers)
    # opset 17 and IR 8: old enough for any onnxruntime >= 1.14, new enough for every op used
    model = helper.make_model(graph, producer_name="threadwise-onnxload",
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


def percentile(ordered: list[float], fraction: float) -> float:
    """The nearest-rank percentile of an ascending list (exact: a report holds few samples)."""
    index = max(0, min(len(ordered) - 1, int(fraction * len(ordered) + 0.999999) - 1))
    return ordered[index]


def report(latencies_us: list[float], elapsed_s: float) -> str:
    ordered = sorted(latencies_us)
    return json.dumps({"inferences_per_s": round(len(ordered) / elapsed_s, 3),
                       "latency_p50_us": round(percentile(ordered, 0.50), 1),
                       "latency_p99_us": round(percentile(ordered, 0.99), 1),
                       "inferences": len(ordered)})


def session(args: argparse.Namespace, model: bytes) -> Any:
    import onnxruntime as ort

    settings = ort.SessionOptions()
    settings.intra_op_num_threads = args.threads
    settings.inter_op_num_threads = 1
    settings.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    settings.log_severity_level = 3  # errors only: warnings would go to stderr at every start
    if args.no_spin:
        settings.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, sess_options=settings, providers=["CPUExecutionProvider"])


def stop_on_signal(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(0)


def main(argv: list[str]) -> int:
    args = options(argv)
    name_this_process()
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = "1"
    try:
        import numpy as np
        model = build_model(size=args.size, channels=args.channels, seed=args.seed)
        inference = session(args, model)
    except ImportError as missing:
        print(f"onnxload: {missing.name or missing} is not installed for {sys.executable} "
              "(pip install onnxruntime onnx; scripts/setup-python.sh all installs both)", file=sys.stderr)
        return 1
    image = np.random.default_rng(args.seed + 1).standard_normal(
        (1, 3, args.size, args.size)).astype(np.float32)
    feed = {"image": image}
    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGINT, stop_on_signal)
    inference.run(None, feed)  # the first run allocates and starts the pool: not measured
    print("onnxload: ready", file=sys.stderr, flush=True)

    think_s = args.think_us / 1e6
    report_s = args.report_ms / 1000
    started = time.monotonic()
    end = started + args.duration if args.duration is not None else float("inf")
    report_start, latencies = started, []
    try:
        while True:
            before = time.perf_counter()
            inference.run(None, feed)
            latencies.append((time.perf_counter() - before) * 1e6)
            if think_s:
                time.sleep(think_s)
            now = time.monotonic()
            if now >= end or now - report_start >= report_s:
                print(report(latencies, now - report_start), flush=True)
                report_start, latencies = now, []
                if now >= end:
                    return 0
    except SystemExit:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
