"""Every install hint installs this project's distribution, never PyPI's unrelated ``portable``.

What this proves, per scheme of ``portable.urls``' tables (each built-in scheme whose driver
lives in an adapter or contrib distribution, each engine of a multi-engine storage scheme with and
without ``?engine=``, and the ``redis://``/``rediss://`` idempotency stores):

1. Every distribution of the repository (the core ``portable-cloud`` and each ``adapters/*`` and
   ``contrib/*`` one) builds into a wheel with its own build backend (``uv build --wheel``).
2. In a fresh virtual environment that holds only the core wheel, naming the scheme raises
   ``MissingDependency`` (not another error) whose message says ``pip install '...'``.
3. That hint, resolved by uv against a wheel index holding only this repository's wheels,
   installs exactly the distributions the hint names through ``portable-cloud``'s extras
   (``portable-cloud[aws]`` -> ``portable-cloud-aws``), all of them this project's; and the wheel
   installed holds the module whose absence raised the error (``s3://`` -> ``portable_obstore``),
   so the hint names the distribution of the scheme's default engine. The hint never names
   ``portable`` (with PyPI as index, that would install the unrelated project).

And, without building anything: every ``pip install portable...`` written in the docs, the
READMEs and the code names a distribution of this repository and extras it declares.

The wheel tests are ``slow`` (5 to 10 s: eight wheel builds). What they do not prove: that the third-party dependencies (s3fs, boto3, ...) resolve together.
They are excluded from the resolution (``uv pip install --excludes``), so the test downloads
nothing from PyPI and runs offline once uv's cache holds the build backends (hatchling, and
setuptools for ``adapters/kafka``, which compiles ``portable_kafka._speedups``; with network, uv
fetches them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from portable import urls

ROOT = Path(__file__).resolve().parents[1]
CORE = "portable-cloud"
HINT = re.compile(r"pip install '([^']+)'|pip install (\S+)")



def _distribution_dirs() -> list[Path]:
    dirs = [ROOT]
    for top in ("adapters", "contrib"):
        dirs += sorted(d for d in (ROOT / top).iterdir() if (d / "pyproject.toml").is_file())
    return dirs


def _cases() -> list[tuple[str, str]]:
    """``(domain, url)`` for every scheme whose driver is not in the core."""
    cases = []
    for domain, table in urls._BUILTIN.items():
        for scheme, (_target, extra) in table.items():
            if extra is not None:
                cases.append((domain, f"{scheme}://probe/x"))
    for scheme, engines in urls._STORAGE_ENGINES.items():
        if ("storage", f"{scheme}://probe/x") not in cases:
            cases.append(("storage", f"{scheme}://probe/x"))
        cases += [("storage", f"{scheme}://probe/x?engine={engine}") for engine in engines]
    for scheme in ("redis", "rediss"):
        if ("idempotency", f"{scheme}://probe/x") not in cases:
            cases.append(("idempotency", f"{scheme}://probe/x"))
    return sorted(cases)


CASES = _cases()

# Runs in the fresh environment: records what naming each URL raises.
_PROBE = """
import json, sys
from portable.errors import MissingDependency
from portable import urls
import portable.idempotency

results = {}
for domain, url in json.loads(sys.argv[1]):
    try:
        if domain == "idempotency":
            portable.idempotency.open_store(url)
        else:
            urls.driver_class(domain, url)
    except MissingDependency as exc:
        cause = exc.__cause__
        missing = cause.name if isinstance(cause, ModuleNotFoundError) else None
        results[url + " " + domain] = {"hint": str(exc), "missing": missing}
    except Exception as exc:
        results[url + " " + domain] = {"error": f"{type(exc).__name__}: {exc}"}
    else:
        results[url + " " + domain] = {"error": "opened with only the core installed"}
print(json.dumps(results))
"""


@dataclass(frozen=True)
class Wheel:
    path: Path
    name: str  #: canonical distribution name
    requires: tuple[Requirement, ...]
    top_level: frozenset[str]  #: the importable packages it holds

    def extra_requires(self, extra: str) -> set[str]:
        return {
            canonicalize_name(r.name)
            for r in self.requires
            if r.marker is not None and r.marker.evaluate({"extra": extra})
        }


def _read_wheel(path: Path) -> Wheel:
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode("utf-8"))
    top = {n.split("/", 1)[0] for n in names if "/" in n and not n.split("/", 1)[0].endswith((".dist-info", ".data"))}
    return Wheel(
        path=path,
        name=canonicalize_name(metadata["Name"]),
        requires=tuple(Requirement(r) for r in metadata.get_all("Requires-Dist") or ()),
        top_level=frozenset(top),
    )


def _env() -> dict[str, str]:
    """The caller's environment without what would leak the checkout or the shared venv in."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
        and not k.startswith("PORTABLE_")
        and not (k.startswith("UV_") and k != "UV_CACHE_DIR")
    }


def _run(args: list[str | Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300
    )


@dataclass(frozen=True)
class Setup:
    uv: Path
    wheelhouse: Path
    wheels: dict[str, Wheel]
    excludes: Path
    python: Path
    results: dict[str, dict[str, str | None]]
    work: Path


def _find_uv() -> Path | None:
    beside = Path(sys.executable).with_name("uv")
    if beside.is_file():
        return beside
    found = shutil.which("uv")
    return Path(found) if found else None


@pytest.fixture(scope="module")  # builds eight wheels: 5 to 10 s
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    uv = _find_uv()
    if uv is None:
        pytest.skip("uv is not installed (bash scripts/test installs it into .venv)")
    work = tmp_path_factory.mktemp("distribution")
    wheelhouse = work / "wheels"
    for directory in _distribution_dirs():
        build = ["--no-config", "build", "--wheel", "--quiet", "--out-dir", wheelhouse, directory]
        done = _run([uv, "--offline", *build], work)
        if done.returncode != 0:  # the build backend is not in uv's cache yet: fetch it
            done = _run([uv, *build], work)
        assert done.returncode == 0, f"building {directory} failed:\n{done.stderr}"
    wheels = {w.name: w for w in map(_read_wheel, sorted(wheelhouse.glob("*.whl")))}
    assert len(wheels) == len(_distribution_dirs()), sorted(wheels)

    ours = set(wheels)
    third_party = sorted(
        {canonicalize_name(r.name) for w in wheels.values() for r in w.requires} - ours
    )
    excludes = work / "third-party.txt"
    excludes.write_text("".join(f"{name}\n" for name in third_party))

    venv = work / "venv"
    made = _run([uv, "--no-config", "venv", "--quiet", "--python", sys.executable, venv], work)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    core = _run(
        [uv, "--no-config", "pip", "install", "--offline", "--python", python,
         "--no-index", "--find-links", wheelhouse, "--excludes", excludes, CORE],
        work,
    )  # third-party dependencies of the core (tenacity) are left out too: it imports them lazily
    assert core.returncode == 0, core.stderr

    probe = _run([python, "-c", _PROBE, json.dumps(CASES)], work)
    assert probe.returncode == 0, probe.stderr
    results = json.loads(probe.stdout)
    return Setup(uv, wheelhouse, wheels, excludes, python, results, work)


@pytest.mark.slow
def test_every_distribution_builds_and_depends_on_the_core(setup: Setup) -> None:
    assert CORE in setup.wheels
    assert "portable" in setup.wheels[CORE].top_level
    for name, wheel in setup.wheels.items():
        assert name.startswith(CORE), f"{name}: every distribution is named {CORE}[-<part>]"
        if name != CORE:
            assert CORE in {canonicalize_name(r.name) for r in wheel.requires}, f"{name} does not require {CORE}"
    fresh = _run([setup.python, "-c", "import portable, sys; print(portable.__file__)"], setup.work)
    assert fresh.returncode == 0, fresh.stderr
    imported = Path(fresh.stdout.strip()).resolve()
    assert imported.is_relative_to(setup.work.resolve()), f"the fresh venv imports another portable: {imported}"


def _case_id(case: tuple[str, str]) -> str:
    domain, url = case
    scheme, _, rest = url.partition("://")
    query = rest.partition("?")[2]
    return f"{domain}-{scheme}" + (f"-{query}" if query else "")


@pytest.mark.slow
@pytest.mark.parametrize(("domain", "url"), CASES, ids=[_case_id(c) for c in CASES])
def test_the_install_hint_installs_this_projects_distribution(setup: Setup, domain: str, url: str) -> None:
    result = setup.results[f"{url} {domain}"]
    assert "error" not in result, f"{domain} {url} with only {CORE} installed: {result['error']}"
    message = str(result["hint"])
    found = HINT.search(message)
    assert found, f"{domain} {url}: MissingDependency without a pip install hint: {message!r}"
    requirement = Requirement(found.group(1) or found.group(2))
    name = canonicalize_name(requirement.name)
    assert name != "portable", (
        f"{domain} {url}: the hint {requirement} names PyPI's unrelated 'portable' project; "
        f"this project's distribution is {CORE}: {message!r}"
    )
    assert name in setup.wheels, f"{domain} {url}: the hint names {name}, not one of {sorted(setup.wheels)}"

    expected = {name} - {CORE}
    for extra in requirement.extras:
        named = setup.wheels[name].extra_requires(extra)
        assert named, f"{domain} {url}: {name} declares no extra {extra!r}"
        expected |= named
    assert expected, f"{domain} {url}: the hint {requirement} installs nothing beyond the core"
    # and this project's distributions that those require (the opendal engine builds on the obstore one)
    todo = list(expected)
    while todo:
        for dependency in setup.wheels[todo.pop()].requires:
            dep = canonicalize_name(dependency.name)
            if dependency.marker is None and dep in setup.wheels and dep != CORE and dep not in expected:
                expected.add(dep)
                todo.append(dep)

    plan = _run(
        [setup.uv, "--no-config", "pip", "install", "--dry-run", "--offline", "--python", setup.python,
         "--no-index", "--find-links", setup.wheelhouse, "--excludes", setup.excludes, str(requirement)],
        setup.work,
    )
    output = plan.stdout + plan.stderr
    assert plan.returncode == 0, f"{domain} {url}: uv cannot resolve {requirement}:\n{output}"
    planned = {
        canonicalize_name(m.group(1)) for m in re.finditer(r"^ \+ ([A-Za-z0-9._-]+)==", output, re.M)
    }
    assert planned == expected, f"{domain} {url}: {requirement} would install {sorted(planned)}:\n{output}"
    assert planned <= set(setup.wheels)

    missing = result["missing"]
    if missing is not None:
        holders = {w for w in planned if missing.split(".")[0] in setup.wheels[w].top_level}
        assert holders, (
            f"{domain} {url} needs the module {missing}, but {requirement} installs "
            f"{sorted(planned)}, which do not hold it"
        )


# -- the install commands written in the repository ----------------------------------------------

_PIP_INSTALL = re.compile(r"pip install\b")
_ARG = re.compile(r"^[\w.\-\[\],;{}'\"`/=<>~!:@+()]+$")
_NAMED = re.compile(r"^(portable[\w.-]*)(?:\[([^\]]*)\])?$")


def _declared() -> dict[str, set[str]]:
    """``{distribution: its extras}`` from every pyproject.toml of the repository."""
    declared = {}
    for directory in _distribution_dirs():
        project = tomllib.loads((directory / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        declared[canonicalize_name(project["name"])] = set(project.get("optional-dependencies", {}))
    return declared


def _written_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for top in ("portable", "adapters", "contrib"):
        files += sorted(p for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".md") and "__pycache__" not in p.parts)
    return [f for f in files if f.is_file()]


def _install_commands(text: str) -> list[tuple[int, list[str]]]:
    """``(line, requirement tokens)`` of each ``pip install`` in ``text``.

    A command ends with its line, or with the next line when nothing follows ``pip install`` on
    its own (a docstring that wraps), and at a comment or the end of inline code.
    """
    found = []
    for match in _PIP_INSTALL.finditer(text):
        rest = text[match.end() :].split("\n", 2)
        words = rest[0].split() or (rest[1].split() if len(rest) > 1 else [])
        tokens = []
        for word in words:
            if word.startswith("#") or not _ARG.match(word):
                break
            tokens.append(word.strip("'\"`(),;."))
            if word.rstrip(",;.").endswith(("`", ")")):
                break
        found.append((text.count("\n", 0, match.start()) + 1, tokens))
    return found


def test_every_install_command_names_this_projects_distributions():
    """Each ``pip install portable...`` in the docs, READMEs and code names a distribution of
    this repository (``portable-cloud``, ``portable-cloud-aws``, ...) and extras it declares."""
    declared = _declared()
    bad = []
    for path in _written_files():
        for line, tokens in _install_commands(path.read_text(encoding="utf-8")):
            for token in tokens:
                named = _NAMED.match(token)
                if named is None:
                    continue
                where = f"{path.relative_to(ROOT)}:{line}: pip install ... {token}"
                name = canonicalize_name(named.group(1))
                if name not in declared:
                    bad.append(f"{where}: no distribution {name!r} here")
                    continue
                extras = named.group(2)
                if extras is None or "{" in extras or "<" in extras:  # a template: portable-cloud[{extra}]
                    continue
                unknown = sorted({e.strip() for e in extras.split(",")} - declared[name])
                if unknown:
                    bad.append(f"{where}: {name} declares no extra {', '.join(unknown)}")
    assert not bad, (
        f"install commands that do not install this project (its distributions: {', '.join(sorted(declared))}):\n"
        + "\n".join(bad)
    )
