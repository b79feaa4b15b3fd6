"""Time to first token of a model shape against the PyTorch anchor, interleaved, on one GPU.

    python tools/prefill_ttft.py [--shape llama-3.1-8b] [--layers 32] [--prompt 1024]

Random bfloat16 weights are made on the GPU by PyTorch once and shared (DLPack, no copy) by
``pygpukit.llm.CausalLM`` and the PyTorch anchor (``pygpukit.llm.torch_anchor``: eager prefill
with SDPA). Each round times, in turn: PyGPUkit's prefill (``generate(max_new_tokens=1)``,
prompt to the first token on the host), the same with the projection split and transposed by
copies (the path before prefill attention read q/k/v in place; ``--no-old`` skips it) and the
anchor's eager prefill. Prints the medians, and the time the model's matmuls take in PyTorch
(each weight's GEMM of the prompt rows, timed alone, summed over the layers, plus the head's
last row): the acceptance compares TTFT with that matmul time. Needs torch with CUDA.
"""

from __future__ import annotations

import statistics
import sys

import numpy as np
from llm_torch_common import interleaved_ms, matmul_ms, prefill_arguments, prefill_pair

from pygpukit.llm.models import llama


def main() -> None:
    """Parse the arguments, build both models, time them in interleaved rounds."""
    parser = prefill_arguments(__doc__.splitlines()[0])
    parser.add_argument("--no-old", action="store_true", help="skip the copying path")
    args = parser.parse_args()
    cfg, _weights, model, anchor = prefill_pair(args.shape, args.layers, args.prompt)
    rng = np.random.default_rng(0)
    ids = rng.integers(3, cfg.vocab_size, (1, args.prompt))
    prompt = ids[0].tolist()
    split = llama._UncachedAttend.from_projection

    def ours() -> object:
        return model.generate(prompt, max_new_tokens=1).token_ids

    def old() -> object:
        llama._UncachedAttend.from_projection = None  # type: ignore[assignment,method-assign]
        try:
            return model.generate(prompt, max_new_tokens=1).token_ids
        finally:
            llama._UncachedAttend.from_projection = split  # type: ignore[method-assign]

    def theirs() -> object:
        anchor.prefill(ids)
        return anchor.tokens(1, args.prompt, 1)

    cases = {"pygpukit": ours, "anchor (torch eager)": theirs}
    if not args.no_old:
        cases["pygpukit, copies"] = old
    first, times = interleaved_ms(cases, args.rounds)
    mm = sum(matmul_ms(cfg, args.prompt, "torch").values())
    base = statistics.median(times["anchor (torch eager)"])
    print(f"{args.shape} ({cfg.num_layers} layers), {args.prompt}-token prompt, bf16")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"  {name:22s} {med:8.2f} ms  x{base / med:.3f} vs anchor  "
            f"{med / mm:.3f}x the matmul time  (range {min(ts):.2f}-{max(ts):.2f})"
        )
    print(f"  matmuls alone (torch)  {mm:8.2f} ms")
    if not args.no_old:
        same = np.array_equal(np.asarray(first["pygpukit"]), np.asarray(first["pygpukit, copies"]))
        print(f"  first token equal with and without the copies: {same}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
