"""docs/ARCHITECTURE.md's import rules, read from the package's source with ``ast``: no layer imports upward.

Every import counts, those inside functions and ``TYPE_CHECKING`` blocks
included. A module's rule is its most specific entry in ``MAY_IMPORT``; a
module outside every entry (``cli.py``, ``bench/``...) sits on top and may
import anything, except the modules behind a facade (``FACADES``). The modules
import one another without a cycle.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fucina_jobs"


class Facade(str):
    """A package itself (its ``__init__``): the layers that may import it import that, never one of its modules."""


ENGINES = Facade("fucina_jobs.engines")  # the decoder, as the layers above it see it
DATA = Facade("fucina_jobs.data")  # data in and out: datasets, records and rejects, the run folder, storage
RUN = Facade("fucina_jobs.pipeline")  # the run: the Hydra command, the driver, shards and replicas
MODELS = Facade("fucina_jobs.models")  # the package itself holds only the embedded model's name, which config.py's default is
#: Packages that every module outside them, on any layer, reaches through the package itself.
FACADES = (DATA, RUN)

#: Who may import what of the project: module (or package) prefix -> the prefixes (or facades) it may import.
MAY_IMPORT: dict[str, set[str]] = {
    "fucina_jobs.cache": set(),
    "fucina_jobs.confidence": set(),
    "fucina_jobs.run_info": set(),
    "fucina_jobs.private_apis": set(),  # the private names of Ray and torch we call, in one place
    "fucina_jobs.grounding": {"fucina_jobs.grounding"},
    "fucina_jobs.rules": {"fucina_jobs.rules"},
    "fucina_jobs.native": {"fucina_jobs.cache"},
    "fucina_jobs.decoding": {"fucina_jobs.decoding", "fucina_jobs.native"},
    # The design record's layering inside the decoder:
    "fucina_jobs.decoding.processor": set(),  # the processor knows no grammar
    "fucina_jobs.decoding.sampler": {"fucina_jobs.decoding.processor", "fucina_jobs.native"},
    "fucina_jobs.decoding.constraint": {"fucina_jobs.decoding.processor", "fucina_jobs.native"},  # no speculation, no jobs
    "fucina_jobs.decoding.drafting": set(),  # token lists only
    "fucina_jobs.decoding.constrained_source": {"fucina_jobs.decoding.processor", "fucina_jobs.decoding.drafting"},  # its two protocols
    "fucina_jobs.decoding.runner": set(),
    "fucina_jobs.models": {"fucina_jobs.models", "fucina_jobs.native", "fucina_jobs.cache", "fucina_jobs.private_apis"},
    "fucina_jobs.config": {MODELS},  # every setting and its default: below the engines, which build their options from it
    "fucina_jobs.engines": {"fucina_jobs.engines", "fucina_jobs.decoding", "fucina_jobs.models", "fucina_jobs.confidence", "fucina_jobs.config"},
    "fucina_jobs.engines.vllm": {ENGINES, "fucina_jobs.engines.base", "fucina_jobs.config"},
    "fucina_jobs.engines.canned": {ENGINES, "fucina_jobs.engines.base", "fucina_jobs.config"},
    "fucina_jobs.learning": {"fucina_jobs.learning", "fucina_jobs.grounding"},
    "fucina_jobs.data": {"fucina_jobs.data", "fucina_jobs.config", "fucina_jobs.confidence"},
    "fucina_jobs.pipeline": {
        "fucina_jobs.pipeline",
        "fucina_jobs.config",
        DATA,
        ENGINES,
        "fucina_jobs.grounding",
        "fucina_jobs.rules",
        "fucina_jobs.confidence",
        "fucina_jobs.run_info",
        "fucina_jobs.private_apis",
    },
    "fucina_jobs.eval": {
        "fucina_jobs.eval",
        "fucina_jobs.config",
        DATA,
        RUN,
        ENGINES,
        "fucina_jobs.grounding",
        "fucina_jobs.confidence",
        "fucina_jobs.run_info",
    },
    "fucina_jobs.review": {"fucina_jobs.review", "fucina_jobs.eval", "fucina_jobs.config", DATA, "fucina_jobs.grounding", "fucina_jobs.confidence"},
}
#: Libraries a layer must not import: the decoder is a library the pipeline uses, not the other way round.
MAY_NOT_IMPORT: dict[str, set[str]] = {
    "fucina_jobs.decoding": {"ray", "hydra", "omegaconf", "pyarrow", "pydantic", "vllm"},
    "fucina_jobs.models": {"ray", "hydra", "omegaconf", "pyarrow", "pydantic", "vllm"},
    "fucina_jobs.engines": {"ray", "hydra", "omegaconf", "pyarrow"},
    "fucina_jobs.grounding": {"ray", "hydra", "omegaconf", "torch", "vllm"},
    "fucina_jobs.rules": {"ray", "hydra", "omegaconf", "torch", "vllm"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(module: str, source: str) -> set[str]:
    """Every module ``source`` imports, relative imports made absolute; ``from X import name`` counts ``X.name`` where that is a module."""
    found: set[str] = set()
    here = _package(module)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if _is_module(sub) else target)
    return found


#: A package -> the packages whose modules it imports public names of only (no leading underscore): ``learn``
#: scores options by the grounding's candidates, through their public API, not the grammar's internals.
PUBLIC_ONLY: dict[str, set[str]] = {"fucina_jobs.learning": {"fucina_jobs.grounding"}}


def private_imports(module: str, source: str) -> list[str]:
    """The private names (a leading underscore, or not in the module's ``__all__``) that ``module`` imports from a
    package ``PUBLIC_ONLY`` names for it, one line each."""
    guarded = _rule(PUBLIC_ONLY, module) or set()
    here = _package(module)
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if any(target == p or target.startswith(p + ".") for p in guarded):
                public = getattr(importlib.import_module(target), "__all__", None)  # a module that lists its API: that list
                found += [
                    f"{module} imports {target}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") or (public is not None and alias.name not in public)
                ]
    return found


def _package(module: str) -> list[str]:
    """The package a relative import in ``module`` starts from, as its parts (a package's ``__init__`` is its own)."""
    parts = module.split(".")
    return parts if (PACKAGE.parent.joinpath(*parts) / "__init__.py").is_file() else parts[:-1]


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _rule(table: dict[str, set[str]], module: str) -> set[str] | None:
    keys = [k for k in table if module == k or module.startswith(k + ".")]
    return table[max(keys, key=len)] if keys else None


def _allows(entry: str, name: str) -> bool:
    if isinstance(entry, Facade):
        return name == entry
    return name == entry or name.startswith(entry + ".")


def violations(module: str, source: str) -> list[str]:
    """What ``module`` imports against the rules, one line each."""
    allowed, banned, out = _rule(MAY_IMPORT, module), _rule(MAY_NOT_IMPORT, module) or set(), []
    for name in sorted(imports(module, source)):
        if name.startswith("fucina_jobs") and allowed is not None and name != module:
            if not any(_allows(entry, name) for entry in allowed):
                out.append(f"{module} imports {name}")
        elif name.split(".")[0] in banned:
            out.append(f"{module} imports {name.split('.')[0]}")
    return out


def facade_violations(module: str, source: str) -> list[str]:
    """The modules behind a facade that ``module``, outside that package, imports, one line each."""
    return [
        f"{module} imports {name}; import {facade} instead"
        for name in sorted(imports(module, source))
        for facade in FACADES
        if name.startswith(facade + ".") and not (module == facade or module.startswith(facade + "."))
    ]


def import_graph() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports (a package is its ``__init__``)."""
    sources = {module_name(path): path.read_text(encoding="utf-8") for path in sorted(PACKAGE.rglob("*.py"))}

    def node(name: str) -> str:
        while name not in sources:
            name = name.rpartition(".")[0]
        return name

    return {m: {node(n) for n in imports(m, s) if n.startswith("fucina_jobs.")} - {m} for m, s in sources.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle's modules (the strongly connected components of more than one module), by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_layer_imports_upward():
    found = [v for path in sorted(PACKAGE.rglob("*.py")) for v in violations(module_name(path), path.read_text(encoding="utf-8"))]
    assert not found, "layer rules broken (docs/ARCHITECTURE.md):\n" + "\n".join(found)


def test_the_data_and_run_packages_are_imported_through_their_facades():
    found = [v for path in sorted(PACKAGE.rglob("*.py")) for v in facade_violations(module_name(path), path.read_text(encoding="utf-8"))]
    assert not found, "a package's modules imported past its facade (docs/ARCHITECTURE.md):\n" + "\n".join(found)
    for facade in FACADES:  # every name a facade offers is there
        module = importlib.import_module(facade)
        assert module.__all__ and all(getattr(module, name) is not None for name in module.__all__)


def test_no_module_imports_itself_through_a_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_learner_imports_only_public_names_of_the_grounding():
    found = [v for path in sorted(PACKAGE.rglob("*.py")) for v in private_imports(module_name(path), path.read_text(encoding="utf-8"))]
    assert not found, "private names imported across a public-API boundary (tests/test_layers.py PUBLIC_ONLY):\n" + "\n".join(found)
    assert private_imports("fucina_jobs.learning.cues", "from ..grounding.candidates import _capitalized, words")  # the check finds one
    assert private_imports("fucina_jobs.learning.cues", "from ..grounding.candidates import LINE_BREAK")  # not in candidates.__all__
    assert not private_imports("fucina_jobs.learning.cues", "from ..grounding.candidates import words\nfrom .evidence import _x")


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize(
    "module, source",
    [
        ("fucina_jobs.decoding.batch", "from ..config import JobConfig"),
        ("fucina_jobs.decoding.batch", "def f():\n    import ray"),
        ("fucina_jobs.decoding.constraint", "from .drafting import Draft"),
        ("fucina_jobs.native", "from ..models.loading import load_model"),
        ("fucina_jobs.pipeline.replica", "from ..decoding.sampler import Sampler"),
        ("fucina_jobs.pipeline.driver", "from ..engines.fucina import FucinaEngine"),
        ("fucina_jobs.eval.maskbench", "from ..models import loading"),
        ("fucina_jobs.engines.vllm", "from ..decoding.batch import StreamStats"),
        ("fucina_jobs.config", "from .engines import SpecConfig"),
        ("fucina_jobs.config", "from .models.loading import DEFAULT_MODEL"),
        ("fucina_jobs.data.sink", "from ..pipeline import Job"),
        ("fucina_jobs.data.rundir", "from ..engines import Prompt"),
        ("fucina_jobs.pipeline.job_constraint", "from ..learning.learned import learn"),
        ("fucina_jobs.learning.curve", "from ..pipeline import hydra_command"),
        ("fucina_jobs.pipeline.driver", "from ..eval.runs import read_run"),
        ("fucina_jobs.eval.runs", "from ..data.rundir import RunDir"),
        ("fucina_jobs.eval.evaluate", "from ..review.cli import least_certain"),
        ("fucina_jobs.review.cli", "from ..pipeline import Job"),
    ],
)
def test_the_rules_catch_an_upward_import(module, source):
    assert violations(module, source)


def test_the_rules_let_each_layer_import_what_it_may():
    assert not violations("fucina_jobs.pipeline.replica", "from .. import engines\nfrom ..engines import Prompt\nfrom ..config import JobConfig")
    assert not violations("fucina_jobs.engines", "from ..decoding.batch import StreamStats\nfrom .fucina import FucinaEngine")
    assert not violations("fucina_jobs.pipeline.driver", "from ..data import RunDir\nfrom .replica import ShardWorker")
    assert not violations("fucina_jobs.eval.evaluate", "from ..pipeline import Job\nfrom ..data import META_FIELDS")
    assert not violations("fucina_jobs.config", "from .models import DEFAULT_MODEL")


def test_the_facade_check_catches_a_module_behind_a_facade():
    assert facade_violations("fucina_jobs.bench.job", "from ..pipeline.driver import Job")  # bench may import anything, but through the facade
    assert facade_violations("fucina_jobs.cli", "from .data.storage import write_json")
    assert not facade_violations("fucina_jobs.bench.job", "from ..pipeline import Job")
    assert not facade_violations("fucina_jobs.pipeline.driver", "from .replica import ShardWorker")  # inside its own package


def test_private_names_of_ray_and_torch_are_called_from_private_apis_only():
    """docs/ARCHITECTURE.md: a private API we cannot do without is wrapped once, in ``private_apis.py``."""
    private = re.compile(r"\bray\._private\b|\btorch\.ops\.\w+\._\w|\btorch\._C\b")
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{n}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "private_apis.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if private.search(line)
    ]
    assert not found, "private APIs outside fucina_jobs/private_apis.py:\n" + "\n".join(found)
    assert private.search((PACKAGE / "private_apis.py").read_text(encoding="utf-8"))  # the pattern finds what it looks for
