"""Tokenizers from tokenizer.json folders, chat templates, detokenization and stop strings."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from pygpukit.llm.errors import TokenizerError
from pygpukit.llm.tokenizer import (
    Detokenizer,
    StopStrings,
    load_tokenizer,
    render_chat_template,
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France; Berlin is the capital of Germany.",
    "héllo wörld — naïve café, 日本語のテキスト, emoji 🙂🚀 and numbers 12345.",
] * 20
TEMPLATE = (
    "{% for m in messages %}\n"
    "<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}\n"
    "{% endfor %}\n"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _hf_folder(tmp_path, **tokenizer_config):
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<s>", "</s>", "<|end|>", "<|user|>", "<|assistant|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    folder = tmp_path / "model"
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": {"content": "</s>"}, **tokenizer_config}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "config.json").write_text(json.dumps({"eos_token_id": 1}))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 1]}))
    return folder


def test_folder_tokenizer_ids_and_round_trip(tmp_path):
    tok = load_tokenizer(_hf_folder(tmp_path, chat_template=TEMPLATE))
    assert tok is not None
    assert tok.bos_token == "<s>" and tok.bos_token_id == 0
    assert tok.eos_token == "</s>"
    assert tok.eos_token_ids == (2, 1)  # generation config first, duplicates dropped
    assert tok.is_eos(2) and tok.is_eos(1) and not tok.is_eos(0)
    assert {0, 1, 2} <= tok.special_ids
    for text in CORPUS[:3]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
    assert tok.encode("<|user|>hi", add_special_tokens=False)[0] == tok.token_to_id("<|user|>")


def test_folder_without_tokenizer_is_none(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert load_tokenizer(tmp_path) is None


def test_malformed_tokenizer_json(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"model": 5}')
    with pytest.raises(TokenizerError, match=r"tokenizer\.json"):
        load_tokenizer(tmp_path)


def test_chat_template_renders_like_transformers(tmp_path):
    tok = load_tokenizer(_hf_folder(tmp_path, chat_template=TEMPLATE))
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    # trim_blocks drops the newline after each block tag; eos_token comes from the config.
    assert tok.apply_chat_template(messages) == "<|user|>Hi</s>\n<|assistant|>Yo</s>\n<|assistant|>"
    assert tok.apply_chat_template(messages, add_generation_prompt=False).endswith("Yo</s>\n")


def test_chat_template_jinja_file_wins(tmp_path):
    folder = _hf_folder(tmp_path, chat_template=TEMPLATE)
    (folder / "chat_template.jinja").write_text("{{ bos_token }}{{ messages[0]['content'] }}")
    tok = load_tokenizer(folder)
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]) == "<s>x"


def test_named_templates_use_default(tmp_path):
    named = [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]
    tok = load_tokenizer(_hf_folder(tmp_path, chat_template=named))
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]) == "D"


def test_no_template_is_a_clear_error(tmp_path):
    tok = load_tokenizer(_hf_folder(tmp_path))
    with pytest.raises(TokenizerError, match="no chat template"):
        tok.apply_chat_template([{"role": "user", "content": "x"}])


@pytest.mark.parametrize(
    "messages",
    [
        [{"content": "no role"}],
        [{"role": "user", "content": "a"}, {"role": "", "content": "b"}],
        ["just a string"],
        "not a list",
    ],
)
def test_message_without_a_role_is_an_error(messages):
    with pytest.raises(TokenizerError, match=r"role|list"):
        render_chat_template(TEMPLATE, messages)


def test_template_globals_and_filters():
    template = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system role') }}{% endif %}"
        "{{ messages | tojson }}|{{ strftime_now('%Y') | length }}"
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}!{% endfor %}"
    )
    msgs = [{"role": "user", "content": "café <b>"}, {"role": "user", "content": "2"}]
    out = render_chat_template(template, msgs)
    assert out == json.dumps(msgs, ensure_ascii=False) + "|4!"
    with pytest.raises(TokenizerError, match="no system role"):
        render_chat_template(template, [{"role": "system", "content": "x"}])
    with pytest.raises(TokenizerError, match="not valid Jinja"):
        render_chat_template("{% for %}", msgs)


def test_sandbox_blocks_attribute_escapes():
    with pytest.raises(TokenizerError):
        render_chat_template("{{ messages.__class__.__mro__ }}", [{"role": "user"}])


def _random_text(rng: np.random.Generator, n: int) -> str:
    pool = list("abc xyz.,!\n") + list("éüß—日本語テキスト") + ["🙂", "🚀", "👩‍💻"]
    return "".join(rng.choice(pool, size=n).tolist())


def test_detokenizer_never_emits_broken_utf8(tmp_path, rng):
    tok = load_tokenizer(_hf_folder(tmp_path))
    for _ in range(20):
        text = _random_text(rng, int(rng.integers(1, 40)))
        ids = tok.encode(text, add_special_tokens=False)
        d = Detokenizer(tok)
        pieces = [d.add(i) for i in ids]
        pieces.append(d.flush())
        assert all("\ufffd" not in p for p in pieces), pieces
        assert "".join(pieces) == text == d.text


def test_detokenizer_flushes_an_incomplete_character(tmp_path):
    tok = load_tokenizer(_hf_folder(tmp_path))
    ids = tok.encode("🦄", add_special_tokens=False)  # not in the corpus: a few byte tokens
    assert len(ids) > 1
    d = tok.detokenizer(context=tok.encode("ok", add_special_tokens=False))
    assert d.extend(ids[:-1]) == ""  # part of the bytes: held back
    assert set(d.flush()) == {"\ufffd"}  # the stream ended mid-character


def test_detokenizer_skips_special_tokens(tmp_path):
    tok = load_tokenizer(_hf_folder(tmp_path))
    ids = [*tok.encode("fox", add_special_tokens=False), tok.token_to_id("</s>")]
    assert Detokenizer(tok).extend(ids) == "fox"
    assert Detokenizer(tok, skip_special_tokens=False).extend(ids) == "fox</s>"


@pytest.mark.parametrize("trial", range(5))
def test_stop_strings_split_anywhere(rng, trial):
    before = _random_text(rng, 30).replace("STOP", "").replace("END", "")
    text = before + "STOP" + _random_text(rng, 10)
    cuts = sorted(rng.choice(len(text), size=min(6, len(text)), replace=False).tolist())
    pieces = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    s = StopStrings(["END", "STOP"])
    out, stopped = "", False
    for p in pieces:
        emitted, stopped = s.feed(p)
        out += emitted
        if stopped:
            break
    assert stopped and out == before and s.matched == "STOP"
    assert s.feed("more") == ("", True)


def test_stop_strings_hold_back_then_release():
    s = StopStrings(["<|end|>"])
    assert s.feed("Hello <|e") == ("Hello ", False)
    assert s.feed("nd of it") == ("<|end of it", False)
    assert s.feed(" <") == (" ", False)
    assert s.flush() == "<"
    earliest = StopStrings(["bb", "a"])
    assert earliest.feed("xbba") == ("x", True) and earliest.matched == "bb"
    assert StopStrings(None).feed("<|end|>") == ("<|end|>", False)
