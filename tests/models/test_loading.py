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
