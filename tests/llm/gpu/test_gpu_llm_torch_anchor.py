"""The llm benchmark's PyTorch anchor on the GPU: graph-replayed greedy decoding of every family
against the float64 NumPy reference model, at batch 1 and 3. Skipped without PyTorch."""

from __future__ import annotations

import secrets

import numpy as np
import pytest
from llm_reference_numpy import CONFIGS, forward

from pygpukit.llm.config import ModelConfig
from pygpukit.llm.random_model import random_weights

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

from pygpukit.llm.torch_anchor import TorchAnchor  # noqa: E402

#: A reference step whose two best logits are closer than this is a near-tie that rounding
#: differences may decide either way: tokens are compared up to the first one.
TIE = 1e-3


def _reference_greedy(cfg, w, prompt, new):
    """Greedy tokens of the NumPy model, cut at the first near-tie."""
    seq, out = list(prompt), []
    for _ in range(new):
        last = forward(cfg, w, np.asarray([seq]))[0, -1]
        top2 = np.sort(last)[-2:]
        if top2[1] - top2[0] < TIE:
            break
        out.append(int(np.argmax(last)))
        seq.append(out[-1])
    return out


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("batch", [1, 3])
def test_anchor_graph_decode_matches_numpy(name, batch, rng, request):
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    seed = secrets.randbits(32)
    request.node.user_properties.append(("weights_seed", seed))
    cfg = {**CONFIGS[name], "eos_token_id": None}
    w = random_weights(cfg, seed)
    anchor = TorchAnchor(
        ModelConfig.from_dict(cfg), w, max_batch=3, max_seq_len=64, device="cuda", dtype="float32"
    )
    assert anchor.use_graphs
    prompts = rng.integers(3, cfg["vocab_size"], (batch, 9))
    got = anchor.generate(prompts, 8)
    anchor.generate(prompts, 8)  # the graph replays again from a fresh prefill
    np.testing.assert_array_equal(anchor.tokens(batch, 9, 8), got)
    compared = 0
    for row, prompt in zip(got, prompts, strict=True):
        want = _reference_greedy(cfg, w, prompt, 8)
        assert row[: len(want)].tolist() == want
        compared += len(want)
    assert compared >= 4 * batch  # near-ties are rare: most tokens were compared
