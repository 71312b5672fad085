"""Where ``model.source`` points: a hub id the hub cache holds loads from the cache's folder, asking the hub nothing."""

from __future__ import annotations

from fucina_jobs.config import ModelConfig
from fucina_jobs.engines import FucinaEngine, resolve_source
from tests.helpers import tiny_model_dir


def test_a_cached_hub_id_loads_from_its_snapshot_without_the_network(tmp_path, monkeypatch):
    snapshot = tmp_path / "models--someone--tiny" / "snapshots" / "abc123"
    tiny_model_dir(snapshot)
    (tmp_path / "models--someone--tiny" / "refs").mkdir()
    (tmp_path / "models--someone--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    asked = []

    def no_network(url, *args, **kwargs):
        asked.append(url)
        raise OSError("no network in this test")

    monkeypatch.setattr("huggingface_hub.file_download.get_hf_file_metadata", no_network)  # what a download asks first
    assert resolve_source("someone/tiny") == str(snapshot)
    engine = FucinaEngine.load(ModelConfig(source="someone/tiny", device="cpu", dtype="float64"))
    assert engine.tokenizer.eos_token_id is not None and asked == []
    assert resolve_source("someone/not-cached") == "someone/not-cached"  # left to the hub, or to its one-line error


def test_an_embedded_model_is_converted_once_when_many_ask_at_once(tmp_path, monkeypatch):
    """Test workers, replicas and a driver on a fresh machine all ask for the default model: one converts, the
    others wait for its folder (before the lock, a second conversion deleted the folder the first had just made)."""
    import threading
    import time

    from fucina_jobs.models import loading

    monkeypatch.setenv("FUCINA_CACHE", str(tmp_path))
    converted = []

    def slow_convert(gguf, target):  # the real conversion takes a minute; what matters is who runs it
        converted.append(threading.get_ident())
        time.sleep(0.3)
        target.mkdir(parents=True)
        (target / "model.safetensors").write_bytes(b"weights")

    monkeypatch.setattr(loading, "_convert_gguf", slow_convert)
    found = []
    askers = [threading.Thread(target=lambda: found.append(loading.embedded_model_dir())) for _ in range(4)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join()
    assert len(converted) == 1 and found == [tmp_path / loading.EMBEDDED[loading.DEFAULT_MODEL].name] * 4
